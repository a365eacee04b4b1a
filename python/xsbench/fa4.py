"""FlashAttention-4 (the PyPI package flash-attn-4, its CuTe-DSL kernels; on Hopper the sm90
forward) as a baseline of python/bench_attention_torch.py (backend `fa4`).

The GPU machine has no network: scripts/fa4-bundle packs the wheels into .fa4/fa4-site.tar.xz
on the development machine, scripts/fa4-install unpacks it there into /tmp/fa4-site (or
$XSTAGE_FA4_SITE). load() adds that folder with site.addsitedir (at the END of sys.path, so
the machine's own torch, cuda-bindings, ... win; the folder's .pth file puts the CuTe DSL's
packages on the path) and imports flash_attn.cute. Entry point, BSHD tensors:
flash_attn.cute.flash_attn_func(q, k, v, softmax_scale=None, causal=False, ...) -> (out, lse);
causal is bottom-right aligned, which is top-left for equal q and kv lengths (all the bench
runs). Importing this module imports neither torch nor flash_attn."""
import importlib
import importlib.metadata
import os
import site
import sys

SITE_ENV = "XSTAGE_FA4_SITE"
DEFAULT_SITE = "/tmp/fa4-site"
DIST = "flash-attn-4"
ENTRY = "flash_attn.cute.flash_attn_func"


def site_dir(explicit=None):
    """The unpacked bundle's folder: `explicit`, else $XSTAGE_FA4_SITE, else /tmp/fa4-site."""
    return explicit or os.environ.get(SITE_ENV) or DEFAULT_SITE


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _why(e):
    line = (str(e).strip().split("\n") or [""])[0]
    return f"{type(e).__name__}: {line}"[:240]


def load(explicit_site=None):
    """(flash_attn_func, info, None) when flash-attn-4 imports, else (None, info, reason): a
    one-line reason. info (JSON-ready): available, site (the folder added, None if absent),
    version (flash-attn-4), cutlass_dsl (nvidia-cutlass-dsl), entry, reason."""
    d = site_dir(explicit_site)
    info = {"available": False, "entry": ENTRY, "site": None, "version": None, "cutlass_dsl": None}
    if os.path.isdir(d):
        info["site"] = os.path.abspath(d)
        if info["site"] not in sys.path:
            site.addsitedir(info["site"])
    try:
        mod = importlib.import_module("flash_attn.cute")
        func = getattr(mod, "flash_attn_func")
    except Exception as e:  # noqa: BLE001 - any import failure is a skip with its reason
        where = f" (bundle folder {d} " + ("present)" if info["site"] else "absent: scripts/fa4-install unpacks it)")
        info["reason"] = f"flash_attn.cute not importable: {_why(e)}{where}"
        return None, info, info["reason"]
    # flash_attn.cute.__version__ asks importlib.metadata for "fa4", not this distribution.
    info.update(available=True, version=_version(DIST) or getattr(mod, "__version__", None),
                cutlass_dsl=_version("nvidia-cutlass-dsl") or _version("nvidia-cutlass-dsl-libs-base"),
                module=os.path.dirname(getattr(mod, "__file__", "") or ""))
    return func, info, None


def status_line(explicit_site=None):
    """(exit status, one line) of scripts/fa4-install's import probe."""
    func, info, reason = load(explicit_site)
    if func is None:
        return 1, f"fa4-install: FAIL: {reason}"
    return 0, (f"fa4-install: flash-attn-4 {info['version']} (nvidia-cutlass-dsl {info['cutlass_dsl']}) from "
               f"{info['module']}: {ENTRY} importable")


if __name__ == "__main__":  # python3 -m xsbench.fa4 [SITE]: the probe of scripts/fa4-install
    rc, line = status_line(sys.argv[1] if len(sys.argv) > 1 else None)
    print(line, file=sys.stderr if rc else sys.stdout)
    sys.exit(rc)
