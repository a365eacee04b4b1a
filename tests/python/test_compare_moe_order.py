"""python/compare_moe.py --order-check (docs/megamoe.md "Order choice"): the order rule's picks
(scripts/moe-order-check writes them from `xstage moe-routing --plan`) against the measured
expert-wave / interleaved times of `xstage bench moe`. CPU only, no torch."""
import importlib
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _compare_moe():
    sys.path.insert(0, str(REPO / "python"))
    try:
        return importlib.import_module("compare_moe")
    finally:
        sys.path.pop(0)


def _corr():
    return {"checked": True, "passed": True, "rows_checked": 16, "rel_err": 0.005, "max_abs_err": 0.01,
            "rel_tol": 0.02, "nonfinite": 0}


def _row(model, routing, tokens, variant, us):
    return {"model": model, "weights": "w8a8", "routing": routing, "tokens_per_rank": tokens,
            "variant": variant, "median_us": us, "nonfinite": 0, "correctness": _corr()}


# (model, routing, tokens): expert-wave us, interleaved us
TIMES = {("A", "balanced", 512): (104.0, 100.0),    # interleaved 4 % faster
         ("A", "balanced", 8192): (100.0, 110.0),   # expert-wave 10 % faster
         ("B", "skewed", 2048): (100.5, 100.0),     # interleaved 0.5 % faster: either order within 1 %
         ("B", "skewed", 8192): (100.0, 103.0),     # expert-wave 3 % faster
         ("C", "balanced", 512): (100.0, 95.0)}     # no pick for it


def _bench(tmp):
    rows = []
    for (m, r, t), (ew, il) in TIMES.items():
        rows += [_row(m, r, t, "unfused", 120.0), _row(m, r, t, "expert-wave", ew), _row(m, r, t, "interleaved", il)]
    p = tmp / "bench.json"
    p.write_text(json.dumps({"schema": "xstage.bench.moe.v1", "world": 1, "results": rows}))
    return p


PICKS = ("# model tokens routing schedule why\n"
         "A\t512\tbalanced\tinterleaved\tfew rows\n"
         "A\t8192\tbalanced\texpert-wave\tlocality\n"
         "B\t2048\tskewed\texpert-wave\tlocality\n"
         "B\t8192\tskewed\tinterleaved\tfew rows\n")


def test_order_check_counts_right_within_the_tolerance_and_lists_misses(tmp_path):
    cm = _compare_moe()
    picks_path = tmp_path / "picks.tsv"
    picks_path.write_text(PICKS)
    picks = cm.read_picks(str(picks_path))
    assert picks[("B", "skewed", 8192)] == ("interleaved", "few rows")
    rows = [{"model": m, "routing": r, "tokens_per_rank": t, "expert_wave_us": ew, "interleaved_us": il}
            for (m, r, t), (ew, il) in TIMES.items()]
    c = cm.order_check(rows, picks)
    # right: A 512 (faster), A 8192 (faster), B 2048 (0.5 % slower, within 1 %); B 8192 misses by 3 %.
    assert (c["compared"], c["right"], c["faster"]) == (4, 3, 2)
    # expert-wave everywhere: A 8192, B 2048 (within 1 %), B 8192 right; A 512 (4 %) not.
    assert (c["expert_wave_right"], c["expert_wave_faster"]) == (3, 2)
    assert [m["config"] for m in c["misses"]] == ["B skewed 8192"]
    assert c["misses"][0]["picked"] == "interleaved" and c["misses"][0]["faster"] == "expert-wave"
    assert c["misses"][0]["slower_pct"] == pytest.approx(3.0)
    assert c["no_pick"] == ["C balanced 512"]
    # A tighter tolerance turns B 2048 into a miss.
    assert cm.order_check(rows, picks, tol=0.001)["right"] == 2


def test_order_check_from_the_command_line_and_bad_picks(tmp_path):
    bench = _bench(tmp_path)
    picks = tmp_path / "picks.tsv"
    picks.write_text(PICKS)
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, str(REPO / "python" / "compare_moe.py"), str(bench), "--order-check",
                        str(picks), "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the picks are right at 3/4 (the faster order at 2/4); expert-wave everywhere: 3/4 (2/4)" in r.stdout
    assert "miss: B skewed 8192: picked interleaved, 3.0 % slower than expert-wave (few rows)" in r.stdout
    assert json.loads(out.read_text())["summary"]["order_check"]["right"] == 3
    picks.write_text("A\t512\tbalanced\tsideways\n")
    r = subprocess.run([sys.executable, str(REPO / "python" / "compare_moe.py"), str(bench), "--order-check",
                        str(picks)], capture_output=True, text=True)
    assert r.returncode == 2 and "picks.tsv:1" in r.stderr


def test_order_check_rejects_duplicate_picks_bad_tolerances_and_skips_other_weights(tmp_path):
    cm = _compare_moe()
    picks_path = tmp_path / "picks.tsv"
    picks_path.write_text(PICKS + "A\t512\tbalanced\texpert-wave\tagain\n")
    with pytest.raises(cm.InputError, match="picks.tsv:6: a second pick for A balanced 512"):
        cm.read_picks(str(picks_path))
    picks_path.write_text(PICKS)
    picks = cm.read_picks(str(picks_path))
    rows = [{"model": m, "weights": "w8a8", "routing": r, "tokens_per_rank": t, "expert_wave_us": ew,
             "interleaved_us": il} for (m, r, t), (ew, il) in TIMES.items()]
    for bad in (-0.01, 1.0, float("nan")):
        with pytest.raises(cm.InputError, match="--order-tol"):
            cm.order_check(rows, picks, tol=bad)
    # A W4A8 row of a picked configuration is not judged by the W8A8 picks.
    w4 = dict(rows[-2], weights="w4a8-int4", expert_wave_us=200.0)
    c = cm.order_check(rows + [w4], picks)
    assert (c["compared"], c["right"], c["other_weights"]) == (4, 3, 1)


def test_format_ratios_compare_each_w4a8_format_with_w8a8_on_the_better_orders():
    cm = _compare_moe()

    def row(w, ew, il, ok=True, tokens=512):
        return {"weights": w, "model": "A", "routing": "balanced", "tokens_per_rank": tokens,
                "expert_wave_us": ew, "interleaved_us": il, "correctness_ok": ok}

    rows = [row("w8a8", 100.0, 90.0), row("w4a8-int4", 120.0, 95.0),   # 90 / 95 = 0.947: met
            row("w8a8", 100.0, 110.0, tokens=2048), row("w4a8-int4", 200.0, 250.0, tokens=2048),  # 0.5
            row("w4a8-mxfp4", 99.0, None, ok=False),                    # 90 / 99 = 0.91, but a failed check
            row("w4a8-int4", 50.0, 50.0, tokens=8192)]                  # no W8A8 counterpart: not compared
    out = cm.format_ratios(rows)
    assert set(out) == {"w4a8-int4", "w4a8-mxfp4"}
    i = out["w4a8-int4"]
    assert i["compared"] == 2 and i["at_least_bar"] == 1
    assert i["worst"] == pytest.approx(0.5) and i["best"] == pytest.approx(90 / 95)
    m = out["w4a8-mxfp4"]
    assert m["compared"] == 1 and m["at_least_bar"] == 0 and m["best"] == pytest.approx(90 / 99)
    assert cm.format_ratios([row("w8a8", 1.0, 1.0)]) == {}


def test_a_bench_run_with_another_routing_seed_is_not_compared_with_the_pytorch_path(tmp_path):
    bench = _bench(tmp_path)
    doc = json.loads(bench.read_text())
    doc["config"] = {"routing_seed": 2071}
    bench.write_text(json.dumps(doc))
    torch_json = tmp_path / "torch.json"
    torch_json.write_text(json.dumps({"schema": "xstage.bench.moe_torch.v1", "world": 1, "results": []}))
    r = subprocess.run([sys.executable, str(REPO / "python" / "compare_moe.py"), str(bench), str(torch_json)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "routing seed 2071, the PyTorch path seed 2026" in r.stderr
    # Without the PyTorch file the run compares its own variants.
    r = subprocess.run([sys.executable, str(REPO / "python" / "compare_moe.py"), str(bench)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
