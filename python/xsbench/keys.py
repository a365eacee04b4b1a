"""The schemas of the bench JSON files and the keys on which the compare scripts match their
records (one place, so every script matches cells the same way)."""

MOE_GEMM = "xstage.bench.moe_gemm.v1"          # xstage bench moe-gemm, bench_moe_gemm_torch.py
ATTENTION = "xstage.bench.attention.v1"        # xstage bench attention, bench_attention_torch.py
ULYSSES = "xstage.bench.ulysses.v1"            # xstage bench ulysses
ULYSSES_TORCH = "xstage.bench.ulysses_torch.v1"  # bench_ulysses_torch.py
MOE = "xstage.bench.moe.v1"                    # xstage bench moe
MOE_LAYER = "xstage.bench.moe_layer.v1"        # xstage bench moe-layer (older runs)
MOE_TORCH = "xstage.bench.moe_torch.v1"        # bench_moe_torch.py


def moe_gemm_problem(r):
    """(model, op, tokens per expert): one GEMM problem (op l1/l2 for the dense baseline)."""
    return (r["model"], r["op"], r["tokens_per_expert"])


def moe_gemm_cell(r):
    """(model, op, tokens per expert, weights): one cell of `xstage bench moe-gemm`."""
    return moe_gemm_problem(r) + (r.get("weights", "w8a8"),)


def moe_gemm_label(r):
    """A cell's name in reports, with the kernel where the record names it."""
    return " ".join(str(x) for x in moe_gemm_cell(r)) + (f" {r['instantiation']}" if r.get("instantiation") else "")


def moe_layer_cell(r):
    """(model, weights, routing, tokens per rank, variant): one cell of `xstage bench moe`."""
    return (r["model"], r.get("weights", "w8a8"), r["routing"], r["tokens_per_rank"], r["variant"])
