"""python/compare_attention_ab.py (scripts/ab-run's table for `attention` bench lines): the best
median per cell over a set's repetitions, variant / base per cell and per variant, the
correctness gate, refusals."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = "xstage.bench.attention.v1"


def _corr(passed=True):
    return {"checked": True, "passed": passed, "rows_checked": 64, "rel_err": 0.003, "max_abs_err": 2e-4,
            "rel_tol": 0.01, "nonfinite": 0}


def _row(tflops, S=2048, H=16, causal=False, passed=True):
    return {"backend": "xstage", "head_dim": 64, "heads": H, "seqlen": S, "q_len": S, "dtype": "bf16",
            "causal": causal, "causal_order": "grouped" if causal else "", "median_us": 100.0, "tflops": tflops,
            "nonfinite": 0, "correctness": _corr(passed)}


def _write(tmp, name, rows, schema=SCHEMA):
    p = tmp / f"{name}.json"
    p.write_text(json.dumps({"schema": schema, "results": rows}))
    return str(p)


def _run(*args):
    return subprocess.run([sys.executable, str(REPO / "python" / "compare_attention_ab.py"), *args],
                          capture_output=True, text=True, cwd=REPO / "python")


def test_best_of_the_repetitions_and_variant_over_base(tmp_path):
    base = [_write(tmp_path, "b1", [_row(400.0), _row(500.0, causal=True)]),
            _write(tmp_path, "b2", [_row(410.0), _row(490.0, causal=True)])]
    w4 = [_write(tmp_path, "w1", [_row(420.0), _row(480.0, causal=True)]),
          _write(tmp_path, "w2", [_row(451.0), _row(470.0, causal=True)])]
    r = _run("--base", *base, "--variant", "w4", *w4)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("d=64 H=16 S=2048 bf16 ") and "causal" not in ln)
    assert line.split()[-3:] == ["410.0", "451.0", "1.100"], line
    causal = next(ln for ln in r.stdout.splitlines() if "causal grouped" in ln)
    assert causal.split()[-3:] == ["500.0", "480.0", "0.960"], causal
    assert "# w4/base: geomean 1.028, 0.960 .. 1.100, >= base at 1 of 2 cells" in r.stdout


def test_a_failed_cell_is_left_out_and_fails_the_run(tmp_path):
    b = _write(tmp_path, "b", [_row(400.0), _row(300.0, S=1024)])
    v = _write(tmp_path, "v", [_row(999.0, passed=False), _row(330.0, S=1024)])
    r = _run("--base", b, "--variant", "bad", v)
    assert r.returncode == 1
    assert "CORRECTNESS FAIL" in r.stdout + r.stderr
    assert "999.0" not in r.stdout
    assert "# bad/base: geomean 1.100, 1.100 .. 1.100, >= base at 1 of 1 cells" in r.stdout


def test_refusals(tmp_path):
    b = _write(tmp_path, "b", [_row(400.0)])
    other = _write(tmp_path, "o", [], schema="xstage.bench.moe.v1")
    assert _run("--base", b, "--variant", "x", other).returncode == 2
    assert "names no file" in _run("--base", b, "--variant", "x").stderr
    assert "given twice" in _run("--base", b, "--variant", "x", b, "--variant", "x", b).stderr
    none = _write(tmp_path, "n", [_row(400.0, S=4096)])
    r = _run("--base", b, "--variant", "x", none)
    assert r.returncode == 1 and "no cell in common" in r.stderr
