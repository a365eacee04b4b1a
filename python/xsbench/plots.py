"""The frame of the plot scripts (python/plot_*.py): matplotlib with the Agg backend (exit 3
with a note where it is not installed), and writing the figure (exit 2 when it cannot)."""
import sys


def pyplot(tool):
    """matplotlib.pyplot on the Agg backend; exits 3 after a note when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{tool}: matplotlib is not installed (pip install matplotlib); no plot written", file=sys.stderr)
        sys.exit(3)
    return plt


def save(fig, path, tool):
    """Lays out and writes `fig` to `path`; exits 2 when it cannot be written."""
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        print(f"{tool}: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"{tool}: wrote {path}")
