"""Shared helpers of the repository's Python tools (python/compare_*.py, python/bench_*_torch.py,
python/plot_*.py): loading and matching bench JSON (results), the correctness gate every
checker applies first (correctness, rules in docs/checkers.md), table formatting (tables),
the MoE model shapes of bench/moe-models.json (moe_models), and, for the PyTorch baselines
only, CUDA-event timing and output verification (timing, verify; they take the torch module
as an argument, so importing this package never imports torch)."""
