"""python/profile_sdpa_kernels.py without a GPU: shape parsing, refusals, and the summary of a
torch.profiler chrome trace (one record per kernel name, median duration)."""
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
import profile_sdpa_kernels as psk  # noqa: E402


def test_shapes_parse_and_bad_ones_say_why():
    assert psk.parse_shape("64:16:2048") == (64, 16, 2048, False)
    assert psk.parse_shape("128:8:4096:causal") == (128, 8, 4096, True)
    for bad, why in (("64:16", "is not D:H:S"), ("64:x:2", "whole numbers"), ("96:4:128", "head dim 64 or 128"),
                     ("64:4:128:mask", "is not D:H:S")):
        with pytest.raises(ValueError, match=why):
            psk.parse_shape(bad)


def test_summary_takes_launch_facts_and_the_median(tmp_path):
    ev = [{"cat": "kernel", "name": "k1", "dur": d, "args": {"grid": [132, 1, 1], "block": [384, 1, 1],
                                                          "registers per thread": 168, "shared memory": 200000}}
          for d in (10.0, 30.0, 20.0)]
    ev.append({"cat": "cpu_op", "name": "aten::sdpa", "dur": 5.0})
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    (rec,) = psk.summarize(psk.kernel_records(str(p)))
    assert rec["grid"] == [132, 1, 1] and rec["registers_per_thread"] == 168
    assert rec["launches"] == 3 and rec["median_us"] == 20.0


def test_bad_arguments_exit_2():
    r = subprocess.run([sys.executable, str(REPO / "python" / "profile_sdpa_kernels.py"), "--shapes", "64:4",
                        "--backends", "cudnn"], capture_output=True, text=True)
    assert r.returncode == 2 and "is not D:H:S" in r.stderr
    r = subprocess.run([sys.executable, str(REPO / "python" / "profile_sdpa_kernels.py"), "--shapes", "64:4:128",
                        "--backends", "cudnn,bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "backends from" in r.stderr
