"""Output verification of the benches (``python -m xstage.bench`` and, through
python/xsbench/verify.py, python/bench_*_torch.py): every timed cell's output is checked, and the
cell's JSON gets the correctness record the checkers read
(xsbench.correctness, docs/checkers.md):

    {"checked": true, "passed": bool, "max_abs_err": float, "rel_err": float,
     "rows_checked": int, "nonfinite": int, "rel_tol": float, "reference": "..."}

rel_err is the largest per-row relative L2 error over the checked rows (one wrong row fails
the cell, however long the output), max_abs_err the largest element difference; nonfinite
counts the non-finite values of the WHOLE output (a full scan), rows_checked the rows compared
against an fp32 reference (all rows where affordable, else a seeded sample with the first and
last row). The checked call runs on outputs poisoned with NaN: poison_free_blocks() fills the
caching allocator's free blocks of the output's size with NaN first, so a kernel that writes
nothing leaves NaN behind instead of an earlier correct result. Functions take the torch
module as an argument: importing this module never imports torch."""
import math
import random


def sample_rows(n, k, seed):
    """Sorted row indices to check: all n rows if n <= k, else the first, the last and k - 2
    more drawn with `seed` (the same on every rank)."""
    if n <= k:
        return list(range(n))
    rng = random.Random(seed)
    return sorted({0, n - 1} | set(rng.sample(range(1, n - 1), k - 2)))


def poison_free_blocks(torch, shape, dtype, device, count=4):
    """Fills `count` blocks of this shape with NaN and frees them: the next allocations of
    that size (the output of the checked call) start as NaN."""
    if dtype.itemsize == 1:  # fp8 e4m3fn: the byte 0x7F is NaN
        blocks = [torch.full(shape, 0x7F, dtype=torch.uint8, device=device) for _ in range(count)]
    else:
        blocks = [torch.full(shape, float("nan"), dtype=dtype, device=device) for _ in range(count)]
    torch.cuda.synchronize(device)
    del blocks


def nonfinite(torch, t):
    """Non-finite values in t (a full scan)."""
    return int((~torch.isfinite(t)).sum().item())


def compare_rows(torch, got, ref):
    """(max abs err, worst per-row relative L2 err) of got vs ref, both [rows, ...] (flattened
    to 2-D; zero rows give 0, 0); NaN where got has non-finite values."""
    g = got.flatten(1).float() if got.dim() > 1 else got.reshape(-1, 1).float()
    r = ref.flatten(1).float() if ref.dim() > 1 else ref.reshape(-1, 1).float()
    d = g - r
    if not bool(torch.isfinite(d).all()):
        return float("nan"), float("nan")
    floor = max(r.norm(dim=1).mean().item() * 1e-6, 1e-30)
    rel = d.norm(dim=1) / r.norm(dim=1).clamp_min(floor)
    return d.abs().max().item() if d.numel() else 0.0, rel.max().item() if rel.numel() else 0.0


def record(max_abs, rel, rows, bad, rel_tol, reference):
    """The correctness record of one cell (see the module docstring)."""
    fin = lambda x: x if x is not None and math.isfinite(x) else None  # noqa: E731 - JSON has no NaN
    passed = bad == 0 and rows > 0 and fin(rel) is not None and rel <= rel_tol
    return {"checked": True, "passed": bool(passed), "max_abs_err": fin(max_abs), "rel_err": fin(rel),
            "rows_checked": int(rows), "nonfinite": int(bad), "rel_tol": rel_tol, "reference": reference}


def check(torch, got_rows, ref_rows, full_output, rel_tol, reference):
    """The record for `got_rows` (the checked rows of `full_output`) against `ref_rows`."""
    max_abs, rel = compare_rows(torch, got_rows, ref_rows)
    return record(max_abs, rel, got_rows.shape[0], nonfinite(torch, full_output), rel_tol, reference)


def merge_floats(per_rank, rel_tol, reference):
    """One record from the as_floats() lists of every rank: the worst errors (NaN if any rank's
    is), summed row and non-finite counts."""
    def worst(j):
        vals = [r[j] for r in per_rank]
        return max(vals) if all(math.isfinite(v) for v in vals) else float("nan")
    return record(worst(0), worst(1), int(sum(r[2] for r in per_rank)), int(sum(r[3] for r in per_rank)),
                  rel_tol, reference)


def dequant(torch, q, s):
    """fp32 q * s for a 2-D q, with s one scale (0-d or 1 element), per row ([R] or [R, 1]),
    per column ([1, C]) or per block ([R / br, C / bc]), broadcast over its block."""
    R, C = q.shape
    s = s.float()
    if s.numel() == 1:
        return q.float() * s.reshape(())
    if s.dim() == 1:
        s = s.reshape(R, 1) if s.numel() == R else s.reshape(1, C)
    return q.float() * s.repeat_interleave(R // s.shape[0], 0).repeat_interleave(C // s.shape[1], 1)


def as_floats(rec):
    """A record as 4 floats (for an all_gather across ranks): max abs, rel, rows, nonfinite."""
    nan = float("nan")
    return [rec["max_abs_err"] if rec["max_abs_err"] is not None else nan,
            rec["rel_err"] if rec["rel_err"] is not None else nan, float(rec["rows_checked"]), float(rec["nonfinite"])]


def from_floats(vals, rel_tol, reference):
    """The record of as_floats() values."""
    return record(vals[0], vals[1], int(vals[2]), int(vals[3]), rel_tol, reference)


def failed_record(why, rel_tol, reference):
    """The record of a cell whose check could not run (counts as failed)."""
    rec = record(None, None, 0, 0, rel_tol, reference)
    rec["error"] = why
    return rec


def finish(tool, failed):
    """The bench's exit status: 1 (with a line on stderr) when `failed` cells failed their check."""
    if failed:
        import sys
        print(f"{tool}: {failed} cells FAILED their correctness check", file=sys.stderr)
    return 1 if failed else 0


CHECK_HEADER = f" {'#nonfin':>7} {'rel.err':>8} {'check':>5}"


def check_columns(c):
    """The correctness columns of a bench's table line: non-finite count, worst row error, ok/FAIL."""
    rel = c["rel_err"] if c["rel_err"] is not None else float("nan")
    return f" {c['nonfinite']:>7} {rel:>8.1e} {'ok' if c['passed'] else 'FAIL':>5}"


def attention_rows(torch, out, q, k, v, causal, rows, seed, rel_tol):
    """The record of an attention output against an fp32 softmax(q k^T / sqrt(d)) v reference on
    `rows` seeded query rows (over batch, heads and sequence), with a finiteness scan of all of
    `out`. All four tensors are [B, H, S, D] views (a BSHD tensor passes ``t.transpose(1, 2)``);
    causal is top-left aligned (query i sees keys j <= i)."""
    B, H, S, D = q.shape
    Skv = k.shape[2]
    groups = {}
    for p in sample_rows(B * H * S, rows, seed):
        groups.setdefault((p // (H * S), p // S % H), []).append(p % S)
    got, ref = [], []
    for (b, h), ss in groups.items():
        si = torch.tensor(ss, device=q.device)
        sc = (q[b, h].index_select(0, si).float() @ k[b, h].float().t()) / math.sqrt(D)
        if causal:
            sc.masked_fill_(torch.arange(Skv, device=q.device)[None, :] > si[:, None], float("-inf"))
        ref.append(torch.softmax(sc, dim=-1) @ v[b, h].float())
        got.append(out[b, h].index_select(0, si))
    return check(torch, torch.cat(got), torch.cat(ref), out, rel_tol,
                 "fp32 softmax(q k^T / sqrt(d)) v on seeded query rows")
