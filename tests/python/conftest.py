"""pytest setup for the xstage Python package (docs/python.md).

The package is imported from the installed copy when there is one, else from the source tree
(python/), where xstage._ext finds an in-tree extension build (build/python/xstage or
build-py/*/python/xstage; XSTAGE_EXT_DIR overrides). Tests that need what is missing skip and
say why: PyTorch, the extension, the extension's kernels, a CUDA GPU.
"""
import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if importlib.util.find_spec("xstage") is None or os.environ.get("XSTAGE_TEST_SOURCE") == "1":
    sys.path.insert(0, os.path.join(REPO, "python"))

import xstage  # noqa: E402
from xstage import _ext  # noqa: E402

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
    TORCH_REASON = ""
except ImportError as e:  # pragma: no cover - depends on the machine
    HAVE_TORCH = False
    TORCH_REASON = f"PyTorch is not importable ({e})"

EXT_REASON = _ext.unavailable_reason()
HAVE_EXT = EXT_REASON is None


def ext_has(feature: str) -> bool:
    return HAVE_EXT and bool(getattr(_ext.load(), "has_" + feature, False))


def gpu_reason(feature: str | None = None) -> str | None:
    """Why a GPU test of `feature` ('attention', 'moe') cannot run here, or None."""
    if not HAVE_TORCH:
        return TORCH_REASON
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"the kernels are built for sm_90a (Hopper); this GPU is sm_{major}{minor}"
    if not HAVE_EXT:
        return EXT_REASON
    if feature is not None and not ext_has(feature):
        return f"the extension was built without the {feature} kernels"
    return None


needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason=TORCH_REASON or "PyTorch is not importable")
needs_ext = pytest.mark.skipif(not HAVE_EXT, reason=EXT_REASON or "extension not built")


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        feature = marker.kwargs.get("feature")
        reason = gpu_reason(feature)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_report_header(config):
    st = xstage.extension_status()
    return [f"xstage from {os.path.dirname(xstage.__file__)}; extension: "
            + (f"{st['path']} (attention={st['attention']}, moe={st['moe']})" if st["available"] else st["reason"]),
            "torch: " + (__import__("torch").__version__ if HAVE_TORCH else TORCH_REASON)]
