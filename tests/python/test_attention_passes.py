"""python/attention_passes.py: per-cell medians over repeated xstage-vs-cuDNN passes of
compare_attention.py, the correctness gate, the exit status and a one-line refusal."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def _row(x_us, c_us, S=1024, ok=True, c_ok=True):
    return {"seqlen": S, "heads": 12, "head_dim": 64, "dtype": "bf16", "causal": False,
            "xstage_median_us": x_us, "correctness_ok": ok,
            "torch-cudnn": {"median_us": c_us, "correctness_ok": c_ok}}


def _write(tmp, name, rows):
    p = tmp / f"{name}.json"
    p.write_text(json.dumps({"rows": rows}))
    return str(p)


def _run(*paths):
    return subprocess.run([sys.executable, str(REPO / "python" / "attention_passes.py"), *paths],
                          capture_output=True, text=True)


def test_medians_over_passes_and_all_met(tmp_path):
    files = [_write(tmp_path, f"c{i}", [_row(x, c), _row(10.0, 11.0, S=2048)])
             for i, (x, c) in enumerate([(16.0, 16.4), (15.8, 16.0), (17.0, 16.2)])]
    r = _run(*files)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.split()[:1] == ["1024"])
    assert line.split()[-3:] == ["16.00", "16.20", "1.012"], line
    assert "at 2 of 2 cells" in r.stdout


def test_a_cell_below_cudnn_fails_the_run(tmp_path):
    r = _run(_write(tmp_path, "c1", [_row(16.5, 16.0)]), _write(tmp_path, "c2", [_row(16.4, 16.1)]))
    assert r.returncode == 1
    assert "at 0 of 1 cells" in r.stdout


def test_a_failed_check_in_any_pass_is_not_met(tmp_path):
    r = _run(_write(tmp_path, "c1", [_row(10.0, 20.0)]), _write(tmp_path, "c2", [_row(10.0, 20.0, c_ok=False)]))
    assert r.returncode == 1
    assert "FAILED (1 of 2 passes)" in r.stdout
    assert "at 0 of 1 cells" in r.stdout


def test_refusals(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = _run(str(bad))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "bad.json" in r.stderr
    r = _run()
    assert r.returncode != 0 and "Usage" in r.stderr
