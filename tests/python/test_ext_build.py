"""What the extension says about its own build, without PyTorch: the kernels' build options that
bench files and the docs name (docs/python.md)."""
import pytest

from conftest import HAVE_EXT, EXT_REASON

pytestmark = pytest.mark.skipif(not HAVE_EXT, reason=EXT_REASON or "the extension is not built")


def test_the_per_token_k_loop_is_named_exactly_when_the_kernel_is_built():
    """xstage._C.mega_w4a8_tok_k_loop: the per-token Mega-MoE kernel's K loop as compiled
    (XSTAGE_MEGA_TOK_NARROW, 0..3), -1 exactly when the extension has no per-token kernel."""
    from xstage import _ext

    C = _ext.load()
    k_loop = C.mega_w4a8_tok_k_loop  # in every build, with or without the MoE binding
    assert isinstance(k_loop, int)
    assert k_loop in ((0, 1, 2, 3) if C.has_mega_w4a8_tok else (-1,))
