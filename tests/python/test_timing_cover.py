"""xsbench.timing.cover_launches with a stand-in torch (no GPU needed): the host time is taken
after one untimed call, the backlog is queued after the measurement (which synchronises), and
the busy-wait spans 1.5x the host time of every launch; without a calibration only the backlog."""
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from xsbench import timing  # noqa: E402


def _fake_torch(log):
    cuda = types.SimpleNamespace(synchronize=lambda: log.append("sync"),
                                 _sleep=lambda cycles: log.append(("sleep", cycles)))
    return types.SimpleNamespace(cuda=cuda)


class _Backlog:
    def __init__(self, log):
        self.log = log

    def zero_(self):
        self.log.append("backlog")


def test_cover_spans_the_measured_host_time_after_the_backlog():
    log = []

    def call(i):
        log.append(("call", i))
        time.sleep(0.002)   # 2 ms of host time per call

    host = timing.cover_launches(_fake_torch(log), call, 10.0, launches=30, backlog=_Backlog(log))
    assert 1900 <= host <= 20000, host
    calls = [e for e in log if isinstance(e, tuple) and e[0] == "call"]
    assert calls[0] == ("call", 0) and len(calls) == 4           # one untimed, then n = 3 measured
    assert log.index("backlog") > log.index(calls[-1])            # queued after the measurement
    sleeps = [e[1] for e in log if isinstance(e, tuple) and e[0] == "sleep"]
    assert sleeps[-1] == int(1.5 * host * 30 * 10.0)              # the cover: 1.5 x host x launches
    assert log[-1] == ("sleep", sleeps[-1]) and log.index("backlog") < len(log) - 1


def test_without_a_calibration_only_the_backlog_covers():
    log = []
    assert timing.cover_launches(_fake_torch(log), lambda i: log.append(("call", i)), None, 30, _Backlog(log)) is None
    assert log == ["backlog"]
