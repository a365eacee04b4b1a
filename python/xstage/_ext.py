"""Loading the native extension ``xstage._C``.

Found, in order: the folder in ``XSTAGE_EXT_DIR`` (an explicit choice), the installed package
(``pip install .`` / ``pip install -e .``), then the in-tree CMake build folders (``build/python/xstage``,
``build-py/*/python/xstage``) of the source checkout this package lives in, so that
``cmake -DXSTAGE_BUILD_PYTHON=ON`` + ``PYTHONPATH=python`` works without installing.

NCCL: the C++ runtime references libnccl.so.2. PyTorch's copy (the ``nvidia.nccl`` package) is
loaded first when it is installed, so the extension and PyTorch share one NCCL whichever is
imported first; otherwise the extension's RPATH (the NCCL the build found) applies.
"""
from __future__ import annotations

import glob
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

_ext: ModuleType | None = None
_error: str | None = None


def _preload_nccl() -> bool:
    try:
        import ctypes

        import nvidia.nccl  # type: ignore[import-not-found]

        roots = list(getattr(nvidia.nccl, "__path__", [])) or [os.path.dirname(nvidia.nccl.__file__)]
        for root in roots:
            for lib in sorted(glob.glob(os.path.join(root, "lib", "libnccl.so*"))):
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return True
    except Exception:
        pass
    return False


def _candidates() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    if os.environ.get("XSTAGE_EXT_DIR"):
        dirs.append(os.environ["XSTAGE_EXT_DIR"])
    repo = os.path.dirname(os.path.dirname(here))  # python/xstage -> repo root
    if os.path.isfile(os.path.join(repo, "CMakeLists.txt")):
        dirs.append(os.path.join(repo, "build", "python", "xstage"))
        dirs.extend(sorted(glob.glob(os.path.join(repo, "build-py", "*", "python", "xstage"))))
    files = []
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            f = os.path.join(d, "_C" + suffix)
            if os.path.isfile(f):
                files.append(f)
    return files


def _load_file(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("xstage._C", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["xstage._C"] = mod
    return mod


def _try_import() -> ModuleType:
    override = os.environ.get("XSTAGE_EXT_DIR")
    if override:  # an explicit choice wins over an installed copy
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            f = os.path.join(override, "_C" + suffix)
            if os.path.isfile(f):
                return _load_file(f)
    try:
        return importlib.import_module("xstage._C")
    except ModuleNotFoundError as e:
        if e.name not in ("xstage._C", "xstage"):
            raise
    last: Exception | None = None
    for f in _candidates():
        try:
            return _load_file(f)
        except ImportError as e:  # e.g. built for another interpreter
            last = e
    if last is not None:
        raise last
    raise ImportError(
        "xstage: the native extension xstage._C is not built; install the package (pip install .) "
        "or build it (cmake -DXSTAGE_BUILD_PYTHON=ON ...; see docs/python.md)")


def load() -> ModuleType:
    """The extension module; raises ImportError with one line saying why it is unavailable."""
    global _ext, _error
    if _ext is not None:
        return _ext
    if _error is not None:
        raise ImportError(_error)
    # PyTorch's NCCL first, if there is one: the extension then binds to the library PyTorch
    # uses (one libnccl.so.2 per process; an older one loaded first would break `import torch`).
    _preload_nccl()
    try:
        _ext = _try_import()
    except ImportError as e:
        _error = str(e).splitlines()[0] if str(e) else "xstage: cannot import xstage._C"
        raise ImportError(_error) from None
    return _ext


def available() -> bool:
    try:
        load()
        return True
    except ImportError:
        return False


def unavailable_reason() -> str | None:
    try:
        load()
        return None
    except ImportError as e:
        return str(e)
