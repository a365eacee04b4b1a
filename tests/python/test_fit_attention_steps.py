"""python/fit_attention_steps.py (docs/attention.md §Key groups, "One round of tiles"): the line
through median time against key blocks per launch configuration, xstage's own block_n or
--block-n for PyTorch's records, the correctness gate, lines too short to fit, refusals; and
bench_attention_torch.py's --q-len refusal (both run without torch or a GPU)."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = str(REPO / "python")
SCHEMA = "xstage.bench.attention.v1"


def _corr(passed=True):
    return {"checked": True, "passed": passed, "rows_checked": 64, "rel_err": 0.003, "max_abs_err": 2e-4,
            "rel_tol": 0.01, "nonfinite": 0}


def _xs(kv, us, heads=12, q=1024, block_n=128, passed=True):
    return {"backend": "xstage", "instantiation": "bf16_d64_noncausal_rows128", "head_dim": 64, "heads": heads,
            "seqlen": kv, "q_len": q, "batch": 1, "dtype": "bf16", "causal": False, "median_us": us, "tflops": 1.0,
            "nonfinite": 0, "tile": {"block_m": 128, "block_n": block_n}, "correctness": _corr(passed)}


def _torch(kv, us, q=1024):
    return {"backend": "torch-cudnn", "head_dim": 64, "heads": 12, "seqlen": kv, "q_len": q, "batch": 1,
            "dtype": "bf16", "causal": False, "median_us": us, "tflops": 1.0, "nonfinite": 0, "correctness": _corr()}


def _write(tmp, name, rows):
    p = tmp / f"{name}.json"
    p.write_text(json.dumps({"schema": SCHEMA, "results": rows}))
    return str(p)


def _run(*args):
    return subprocess.run([sys.executable, str(REPO / "python" / "fit_attention_steps.py"), *args],
                          capture_output=True, text=True, cwd=PYTHON_DIR, timeout=60)


def _line(out, launch):
    return next(ln for ln in out.splitlines() if ln.strip().startswith(launch)).split()


def test_slope_and_intercept_per_launch(tmp_path):
    # 1.0 µs per 128-key block + 8 µs; one key length of the torch file is 64 keys per block (--block-n).
    xs = _write(tmp_path, "xs", [_xs(kv, 8.0 + kv / 128) for kv in (128, 256, 512, 1024)] +
                [_xs(kv, 7.0 + 0.5 * kv / 128, heads=1, q=128) for kv in (128, 384, 2048)])
    th = _write(tmp_path, "th", [_torch(kv, 6.0 + 2.0 * kv / 64) for kv in (64, 128, 256)])
    r = _run(xs, th, "--block-n", "64", "--json", str(tmp_path / "out.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    f = _line(r.stdout, "bf16_d64_noncausal_rows128 bf16 d=64 H=12 q=1024")
    assert f[-5:-1] == ["4", "1.000", "8.00", "0.00"], f
    f = _line(r.stdout, "bf16_d64_noncausal_rows128 bf16 d=64 H=1 q=128")
    assert f[-5:-1] == ["3", "0.500", "7.00", "0.00"], f
    f = _line(r.stdout, "torch-cudnn bf16 d=64 H=12 q=1024")
    assert f[-5:-1] == ["3", "2.000", "6.00", "0.00"], f
    assert "# correctness: 10 cells checked, all pass" in r.stdout
    doc = json.loads((tmp_path / "out.json").read_text())
    fits = {ln["launch"]: ln["fit"] for ln in doc["lines"]}
    assert abs(fits["torch-cudnn bf16 d=64 H=12 q=1024"]["us_per_block"] - 2.0) < 1e-9


def test_a_failed_cell_is_left_out_and_fails_the_run(tmp_path):
    xs = _write(tmp_path, "xs", [_xs(kv, 8.0 + kv / 128) for kv in (128, 256, 512)] + [_xs(1024, 1.0, passed=False)])
    r = _run(xs)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "CORRECTNESS FAIL" in r.stdout and "kv=1024" in r.stdout
    f = _line(r.stdout, "bf16_d64_noncausal_rows128 bf16 d=64 H=12 q=1024")
    assert f[-5:-1] == ["3", "1.000", "8.00", "0.00"], f


def test_a_line_of_two_block_counts_is_not_fitted(tmp_path):
    # 100 and 128 keys are one block each: two distinct counts only.
    xs = _write(tmp_path, "xs", [_xs(kv, 9.0) for kv in (100, 128, 256)])
    r = _run(xs)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "too short (< 3 block counts)" in r.stdout


def test_refusals(tmp_path):
    r = _run(str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "xstage.bench.moe.v1", "results": []}))
    assert _run(str(other)).returncode == 2
    xs = _write(tmp_path, "xs", [_xs(128, 9.0)])
    r = _run(xs, "--block-n", "0")
    assert r.returncode == 2 and "--block-n must be >= 1" in r.stderr


def test_torch_bench_refuses_a_negative_q_len_before_torch():
    r = subprocess.run([sys.executable, str(REPO / "python" / "bench_attention_torch.py"), "--q-len", "-1"],
                       capture_output=True, text=True, env={"PYTHONPATH": PYTHON_DIR, "PATH": "/usr/bin:/bin"},
                       timeout=60)
    assert r.returncode == 2 and "--q-len >= 0" in r.stderr
