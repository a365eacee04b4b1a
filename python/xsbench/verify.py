"""Output verification of the benches: the functions live in the package (xstage/_verify.py,
shared with ``python -m xstage.bench``) and are re-exported here for python/bench_*_torch.py."""
from xstage._verify import (CHECK_HEADER, as_floats, check, attention_rows, check_columns, compare_rows, dequant, failed_record, finish,  # noqa: F401
                            from_floats, merge_floats, nonfinite, poison_free_blocks, record, sample_rows)
