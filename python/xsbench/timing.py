"""Timing helpers of the PyTorch baselines (python/bench_*_torch.py): argument types, the
input rotation that exceeds L2, CUDA-event timing of individual launches (warm-up first, then
>= 20 timed launches, median and quantiles), the GPU busy-wait that hides host launch overhead,
and the run stamp (date, commit); the ones `python -m xstage.bench` needs too come from
xstage._bench_util. Functions take the torch module as an argument: importing
this module never imports torch."""
import os
import statistics

# One implementation with `python -m xstage.bench`: python/xstage/_bench_util.py (torch-free,
# like this module; python/ is on sys.path wherever xsbench is importable).
from xstage import _bench_util as _u

MIN_ITERS = _u.MIN_ITERS  # a median of fewer launches is noise
ints = _u.ints
add_timing_args = _u.add_timing_args
quantile = _u.quantile
stats_us = _u.stats_us
visible_pairs = _u.visible_pairs
rotate_bytes = _u.rotate_bytes
sets_for = _u.sets_for
time_launches = _u.time_launches
sustain = _u.sustain
record_error = _u.record_error
stamp = _u.stamp


def sleep_rate(torch):
    """GPU cycles per us of torch.cuda._sleep (median of 5 calibrations), or None where
    torch has no _sleep; busy_wait() uses it so every rank waits the same microseconds."""
    if not hasattr(torch.cuda, "_sleep"):
        return None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for _ in range(5):
        n = 2_000_000
        a.record()
        torch.cuda._sleep(n)
        b.record()
        b.synchronize()
        rates.append(n / max(a.elapsed_time(b) * 1e3, 1e-3))
    return statistics.median(rates)


def busy_wait(torch, cycles_per_us, us):
    """Queues a GPU busy-wait of `us` microseconds (nothing without a calibration)."""
    if cycles_per_us and us > 0:
        torch.cuda._sleep(int(us * cycles_per_us))


def host_enqueue_us(torch, call, cycles_per_us, n=3):
    """Host microseconds one eager call(i) costs to enqueue, measured over `n` calls queued
    behind a GPU busy-wait (so the GPU never stalls the host), after one untimed call (a
    backend's first call at a shape builds its plan: cuDNN's graph, a JIT); None without a
    calibration."""
    import time

    if not cycles_per_us:
        return None
    call(0)
    torch.cuda.synchronize()
    busy_wait(torch, cycles_per_us, 2000.0 * n)
    t0 = time.perf_counter()
    for i in range(n):
        call(i)
    host = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    return host


def cover_launches(torch, call, cycles_per_us, launches, backlog=None):
    """Queues the GPU work that keeps `launches` eager calls of `call` from waiting on the host:
    `backlog` zeroed (a large buffer, if given), then a busy-wait of 1.5x their measured host
    time (host_enqueue_us). Returns that host time per call (None without a calibration: then
    only the backlog covers)."""
    host = host_enqueue_us(torch, call, cycles_per_us)
    if backlog is not None:
        backlog.zero_()
    if host is not None:
        busy_wait(torch, cycles_per_us, 1.5 * host * launches)
    return host


def nccl_version(torch):
    """NCCL's version as text ('unknown (...)' if torch cannot say)."""
    try:
        v = torch.cuda.nccl.version()
    except Exception as e:  # noqa: BLE001 - any failure: record it, do not die
        return f"unknown ({e})"
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"
    return str(v)


def agree(torch, dist, dev, ok):
    """True only if every rank says True (keeps the ranks in step around collectives)."""
    t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def gather_floats(torch, dist, dev, vals):
    """[rank][i]: every rank's list of floats `vals` (all ranks pass lists of one length)."""
    t = torch.tensor(vals, dtype=torch.float64, device=dev)
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return [p.tolist() for p in parts]


def import_torch(tool):
    """The torch module on a machine with a CUDA device; None after saying why on stderr
    ('PyTorch not available' / 'no CUDA device'; the benches then exit 3)."""
    import sys
    try:
        import torch
    except ImportError as e:
        print(f"{tool}: PyTorch not available ({e})", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{tool}: no CUDA device", file=sys.stderr)
        return None
    return torch


def init_nccl(torch, port):
    """(torch.distributed, this rank's device) with an NCCL process group, or None without
    CUDA / NCCL. A plain `python3` run (no torchrun environment) is a world of one."""
    if "RANK" not in os.environ:
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(port))
    import torch.distributed as dist
    if not torch.cuda.is_available() or not dist.is_available() or not dist.is_nccl_available():
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # torch without device_id=
        dist.init_process_group("nccl")
    return dist, dev


def run_fields(torch, props, l2):
    """The fields of a bench document that say where and when it ran."""
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device": props.name,
            "sm_count": props.multi_processor_count, "l2_bytes": l2, **stamp()}
