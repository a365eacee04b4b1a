"""python -m xstage.bench refuses bad counts with one line and exit status 2, before it imports
torch or touches a GPU (so these run anywhere)."""
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = str(Path(__file__).resolve().parents[2] / "python")


def run(*args):
    env = {"PYTHONPATH": PYTHON_DIR, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "xstage.bench", *args], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.mark.parametrize("bench", ["attention", "moe-gemm"])
@pytest.mark.parametrize("flags,message", [
    (["--iters", "5"], "--iters must be >= 20"),
    (["--check-rows", "1"], "--check-rows must be >= 2"),
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--warmup-ms", "-1"], "--warmup-ms must be in [0, 60000]"),
    (["--warmup-ms", "70000"], "--warmup-ms must be in [0, 60000]"),
])
def test_bad_counts_are_refused(bench, flags, message):
    extra = ["--cli", "/nonexistent/xstage"] if bench == "moe-gemm" else []
    r = run(bench, *extra, *flags)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"xstage.bench: {message}"


def test_unknown_moe_recipe_is_refused():
    r = run("moe-gemm", "--cli", "/nonexistent/xstage", "--recipes", "w8a8,int3")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "xstage.bench: --recipes takes w8a8, int4_tok, mxfp4_tok, got 'w8a8,int3'"


def test_unknown_benchmark():
    r = run("conv")
    assert r.returncode == 2
    assert "unknown benchmark 'conv'" in r.stderr


def test_help_without_arguments_is_an_error():
    assert run().returncode == 2
    assert run("--help").returncode == 0
