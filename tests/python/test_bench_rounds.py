"""The rounds method of python -m xstage.bench (docs/python.md, Benchmark) and its acceptance
decisions, on plain numbers: no torch, no GPU. The schedule, the combination of rounds (rows:
median of all launches pooled; C++: mean of the runs' medians) and the pass/fail rules."""
import pytest

from xstage import bench
from xstage._bench_util import cli_reference, paired_ratio, pool_rounds, round_order, run_rounds, time_paired

PASSED = {"checked": True, "passed": True}
FAILED = {"checked": True, "passed": False}


def test_round_order_alternates():
    rows = ["ext", "op", "graph", "cudnn"]
    assert round_order(rows, 0) == rows
    assert round_order(rows, 1) == ["cudnn", "graph", "op", "ext"]
    assert round_order(rows, 2) == rows
    assert round_order(rows, 1) is not rows and rows == ["ext", "op", "graph", "cudnn"]   # not reversed in place


def test_schedule_runs_cli_then_rows_each_round_and_cli_once_more():
    log = []

    def cli():
        log.append("C++")
        return {"median_us": 100.0 + len(log)}

    timed, errors, runs = run_rounds(3, ["a", "b", "c"], lambda n: log.append(n) or n.upper(), cli)
    assert log == ["C++", "a", "b", "c", "C++", "c", "b", "a", "C++", "a", "b", "c", "C++"]
    assert timed == {"a": ["A"] * 3, "b": ["B"] * 3, "c": ["C"] * 3}
    assert errors == {} and [r["median_us"] for r in runs] == [101.0, 105.0, 109.0, 113.0]


def test_schedule_without_cli_and_cli_runs_that_find_nothing():
    log = []
    timed, _, runs = run_rounds(2, ["a", "b"], log.append)   # --cli-once / no --cli: rows only
    assert log == ["a", "b", "b", "a"] and runs == []
    _, _, runs = run_rounds(2, ["a"], lambda n: None, lambda: None)   # the C++ run wrote no row: not kept
    assert runs == []


def test_a_row_that_fails_is_left_out_of_later_rounds():
    calls = []

    def time_row(n):
        calls.append(n)
        if n == "b":
            raise RuntimeError("CUDA error: an illegal memory access\nmore lines")
        return n

    timed, errors, _ = run_rounds(2, ["a", "b", "c"], time_row)
    assert calls == ["a", "b", "c", "c", "a"]
    assert errors == {"b": "CUDA error: an illegal memory access"}
    assert timed["a"] == ["a", "a"] and timed["b"] == []


def test_pool_rounds_is_the_median_of_all_launches():
    st = pool_rounds([[10.0, 11.0, 30.0], [12.0, 13.0, 14.0]])
    assert st["round_medians_us"] == [11.0, 13.0]
    assert st["median_us"] == 12.5            # not the mean (12) nor the least (11) of the round medians
    assert st["min_us"] == 10.0 and st["max_us"] == 30.0


def test_cli_reference_is_the_mean_of_the_runs():
    runs = [{"median_us": 97.0, "min_us": 95.0, "tflops": 1030.0, "tflops_best": 1052.0, "rotating_sets": 2,
             "correctness": PASSED},
            {"median_us": 103.0, "min_us": 96.0, "tflops": 970.0, "tflops_best": 1041.0, "rotating_sets": 2,
             "correctness": PASSED}]
    ref = cli_reference(runs)
    assert ref["median_us"] == 100.0 and ref["cli_medians_us"] == [97.0, 103.0]
    assert ref["tflops"] == pytest.approx(1030.0 * 97.0 / 100.0)   # at the mean time, the bench's flop count
    assert ref["min_us"] == 95.0 and ref["tflops_best"] == 1052.0
    assert ref["correctness"]["passed"] and ref["rotating_sets"] == 2
    one = cli_reference(runs[:1])                                   # --cli-once: the one run as it is
    assert one["median_us"] == 97.0 and one["cli_medians_us"] == [97.0] and one["tflops"] == 1030.0


def test_cli_reference_keeps_a_failed_check_of_any_run():
    runs = [{"median_us": 100.0, "correctness": PASSED}, {"median_us": 100.0, "correctness": FAILED}]
    assert not cli_reference(runs)["correctness"]["passed"]
    assert cli_reference([runs[0], {"median_us": 100.0}])["correctness"] is None   # a run without a check
    assert not bench.moe_cell_passed(1.0, True, True, (cli_reference(runs)["correctness"] or {}).get("passed", False))


def test_linear_clock_drift_shifts_alternated_rows_alike():
    """A clock that slows 1 % per step (one C++ run or one row is a step): with 2 rounds the op,
    xstage-ext (the same kernel) and the mean of the C++ runs that bracket the rounds come out
    equal; in 1 round the later row looks slower."""
    def measure(rounds):
        t = [0]

        def now_us():
            t[0] += 1
            return 100.0 * (1 + 0.01 * t[0])

        timed, _, runs = run_rounds(rounds, ["xstage-torch-op", "xstage-ext"], lambda n: [now_us()] * 30,
                                    lambda: {"median_us": now_us()})
        op, ext = (pool_rounds(timed[n])["median_us"] for n in ("xstage-torch-op", "xstage-ext"))
        return op / ext, cli_reference(runs)["cli_medians_us"], op / cli_reference(runs)["median_us"]

    ratio, cli_meds, vs_cli = measure(2)
    assert ratio == pytest.approx(1.0) and cli_meds == pytest.approx([101.0, 104.0, 107.0])
    assert vs_cli == pytest.approx(1.0)
    ratio, _, _ = measure(1)
    assert ratio == pytest.approx(102.0 / 103.0)


@pytest.mark.parametrize("op_us,ok", [(101.9, True), (102.0, True), (102.1, False), (103.0, False)])
def test_attention_op_within_2_percent_of_the_cli_mean(op_us, ok):
    assert bench.attention_shape_passed(op_us, 100.0, True) is ok


def test_attention_failed_check_fails_whatever_the_timing():
    assert not bench.attention_shape_passed(80.0, 100.0, op_checked=False)
    assert not bench.attention_shape_passed(80.0, 100.0, True, cudnn_us=200.0, cudnn_checked=False)


def test_attention_faster_than_cudnn_where_the_cli_is():
    assert bench.attention_shape_passed(101.0, 100.0, True, cudnn_us=105.0)        # C++ and op beat cuDNN
    assert not bench.attention_shape_passed(101.0, 100.0, True, cudnn_us=100.5)    # C++ beats cuDNN, op does not
    assert bench.attention_shape_passed(101.0, 100.0, True, cudnn_us=90.0)         # cuDNN beats C++: not asked


def _attention_rows(op_us, ext_us, op_corr=PASSED):
    shape = {"seqlen": 32768, "heads": 12, "head_dim": 64}
    return [dict(shape, backend="xstage-ext", median_us=ext_us, correctness=PASSED),
            dict(shape, backend="xstage-torch-op", median_us=op_us, correctness=op_corr)]


def test_attention_acceptance_uses_the_mean_of_the_cli_runs():
    key = (32768, 12, 64)
    two = {key: cli_reference([{"median_us": 97.0}, {"median_us": 103.0}])}
    acc = bench._attention_acceptance(_attention_rows(101.5, 101.0), two, "mean of 2 C++ run(s)")
    assert acc["passed"] and acc["shapes"][0]["vs_cli"] == pytest.approx(1.015)
    assert acc["shapes"][0]["cli_medians_us"] == [97.0, 103.0] and "mean of 2 C++ run(s)" in acc["lines"][0]
    first_only = {key: cli_reference([{"median_us": 97.0}])}
    assert not bench._attention_acceptance(_attention_rows(101.5, 101.0), first_only)["passed"]
    acc = bench._attention_acceptance(_attention_rows(103.0, 101.0), two)                 # op 3 % slower
    assert acc["passed"] is False and acc["lines"][1].endswith("FAIL")
    assert bench._attention_acceptance(_attention_rows(99.0, 99.0, FAILED), two)["passed"] is False
    assert bench._attention_acceptance(_attention_rows(99.0, 99.0), {})["passed"] is None  # no --cli


@pytest.mark.parametrize("vs_cli,checks,ok", [
    (0.97, (True, True, True), True),
    (1.2, (True, True, True), True),
    (0.969, (True, True, True), False),
    (1.0, (False, True, True), False),
    (1.0, (True, False, True), False),
    (1.0, (True, True, False), False),
])
def test_moe_cell_acceptance(vs_cli, checks, ok):
    assert bench.moe_cell_passed(vs_cli, *checks) is ok


class _FakeClockTorch:
    """Just enough of torch.cuda for time_paired: events record a shared clock; every launch
    advances it by its call's duration."""

    def __init__(self):
        self.now = 0.0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = fake.now

            def elapsed_time(self, end):   # ms
                return end.t - self.t

        class Cuda:
            pass
        self.cuda = Cuda()
        self.cuda.Event = Event
        self.cuda.synchronize = lambda: None


def test_time_paired_interleaves_rotates_and_separates_inputs():
    torch = _FakeClockTorch()
    log = []

    def call(name, ms):
        def f(i):
            log.append((name, i))
            torch.now += ms
        return f
    a_us, b_us, c_us = time_paired(torch, [call("a", 0.2), call("b", 0.1), call("c", 0.05)], 4)
    assert a_us == pytest.approx([200.0] * 4) and b_us == pytest.approx([100.0] * 4) and c_us == pytest.approx([50.0] * 4)
    # Round 0: a b c; round 1: b c a; round 2: c a b; round 3: a b c. Inputs 0..11 in launch order.
    assert [n for n, _ in log] == list("abc" "bca" "cab" "abc")
    assert [i for _, i in log] == list(range(12))


def test_paired_ratio_is_the_median_of_per_round_ratios():
    assert paired_ratio([10.0, 20.0, 30.0], [10.0, 10.0, 10.0]) == 2.0
    assert paired_ratio([101.0, 99.0, 100.0, 250.0], [100.0, 100.0, 100.0, 100.0]) == pytest.approx(1.005)
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired_ratio([], [])
