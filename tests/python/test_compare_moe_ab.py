"""python/compare_moe_ab.py on `xstage bench moe` sets (the expert-parallel layer's A/B of two
builds, scripts/ab-run): per-cell medians over a set's files, base / new, refusals. The
correctness gate over both kinds is tests/cpu/test_compare_correctness.cpp."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def _corr():
    return {"checked": True, "passed": True, "rows_checked": 16, "rel_err": 0.005, "max_abs_err": 0.01,
            "rel_tol": 0.02, "nonfinite": 0}


def _write(tmp, name, schema, rows):
    p = tmp / f"{name}.json"
    p.write_text(json.dumps({"schema": schema, "results": rows}))
    return str(p)


def _row(variant, us, tokens=8192):
    return {"model": "DSv4-Flash", "weights": "w8a8", "routing": "balanced", "tokens_per_rank": tokens,
            "variant": variant, "median_us": us, "nonfinite": 0, "correctness": _corr()}


def _run(*args):
    return subprocess.run([sys.executable, str(REPO / "python" / "compare_moe_ab.py"), *args],
                          capture_output=True, text=True, cwd=REPO / "python")


def test_layer_sets_give_the_median_per_cell_and_base_over_new(tmp_path):
    moe = "xstage.bench.moe.v1"
    base = [_write(tmp_path, f"b{i}", moe, [_row("expert-wave", us)]) for i, us in enumerate((4573.0, 4593.0, 4700.0))]
    new = [_write(tmp_path, f"n{i}", moe, [_row("expert-wave", us)]) for i, us in enumerate((4650.0, 4537.0, 4500.0))]
    r = _run("--base", *base, "--new", *new)
    assert r.returncode == 0, r.stdout + r.stderr
    # medians 4593 (base) and 4537 (new): 4593 / 4537 = 1.012
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("DSv4-Flash"))
    assert line.split()[-3:] == ["4593.0", "4537.0", "1.012"], line
    assert "# expert-wave: base/new 1.012 .. 1.012, geomean 1.012 over 1 cells" in r.stdout


def test_cells_only_one_side_has_are_left_out_and_none_in_common_is_an_error(tmp_path):
    moe = "xstage.bench.moe.v1"
    b = _write(tmp_path, "b", moe, [_row("expert-wave", 100.0), _row("interleaved", 90.0)])
    n = _write(tmp_path, "n", moe, [_row("expert-wave", 110.0)])
    r = _run("--base", b, "--new", n)
    assert r.returncode == 0 and "interleaved" not in r.stdout.split("# base:")[1].split("# expert-wave")[0]
    n2 = _write(tmp_path, "n2", moe, [_row("expert-wave", 110.0, tokens=2048)])
    r = _run("--base", b, "--new", n2)
    assert r.returncode == 1 and "no common cells" in r.stderr


def test_mixed_kinds_are_refused(tmp_path):
    b = _write(tmp_path, "b", "xstage.bench.moe.v1", [_row("expert-wave", 100.0)])
    n = _write(tmp_path, "n", "xstage.bench.moe_gemm.v1", [])
    r = _run("--base", b, "--new", n)
    assert r.returncode == 2 and "one kind per A/B" in r.stderr
