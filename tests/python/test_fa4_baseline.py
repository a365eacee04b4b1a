"""The fa4 baseline of the attention bench without a GPU or torch (issue 38): flash-attn-4 not
importable -> the backend is skipped with a one-line reason that the JSON records; an
importable one records its version; python/compare_attention.py shows an fa4 column and fails
on a failed fa4 check; scripts/fa4-install fails cleanly on a missing or broken archive and
reports the version of an importable one; scripts/fa4-bundle refuses bad usage."""
import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = str(REPO / "python")


def py(code, *args, env=None):
    e = {"PYTHONPATH": PYTHON_DIR, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=e, timeout=60)


def fake_site(root, version="9.9.9", broken=False):
    """A folder shaped like the unpacked bundle: flash_attn/cute with flash_attn_func, the
    flash-attn-4 dist-info, and a .pth that adds a sub-folder (as nvidia-cutlass-dsl's does)."""
    root = Path(root)
    (root / "flash_attn" / "cute").mkdir(parents=True)
    (root / "flash_attn" / "__init__.py").write_text("")
    body = ("raise ImportError('libcute_dsl_runtime.so: cannot open shared object file')\n" if broken else
            "import dsl_marker\ndef flash_attn_func(q, k, v, causal=False):\n    return q, None\n")
    (root / "flash_attn" / "cute" / "__init__.py").write_text(body)
    (root / "pkgs").mkdir()
    (root / "pkgs" / "dsl_marker.py").write_text("")
    (root / "dsl.pth").write_text("import sys, os; sys.path.insert(0, os.path.join(sys.prefix, 'nowhere'))\npkgs\n")
    dist = root / f"flash_attn_4-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash-attn-4\nVersion: {version}\n")
    return root


PROBE = ("import json, sys; import bench_attention_torch as b; f, info, skipped = b.fa4_backend(sys.argv[1].split(','), "
         "sys.argv[2]); print(json.dumps({'func': f is not None, 'info': info, 'skipped': skipped}))")


def probe(backends, site):
    r = py("import sys; sys.path.insert(0, sys.argv[3]); " + PROBE, backends, str(site), PYTHON_DIR)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_fa4_not_importable_is_skipped_with_a_reason(tmp_path):
    out = probe("cudnn,fa4", tmp_path / "absent")
    assert not out["func"] and not out["info"]["available"]
    reason = out["skipped"]["fa4"]
    assert "\n" not in reason and "flash_attn.cute not importable" in reason and "absent" in reason
    assert out["info"]["reason"] == reason
    # A bundle that is there but does not import (a missing shared library): skipped, with why.
    out = probe("fa4", fake_site(tmp_path / "broken", broken=True))
    assert "cannot open shared object file" in out["skipped"]["fa4"] and "present" in out["skipped"]["fa4"]


def test_fa4_not_asked_for_loads_nothing(tmp_path):
    assert probe("cudnn,flash", fake_site(tmp_path / "s")) == {"func": False, "info": None, "skipped": {}}


def test_fa4_importable_records_its_version(tmp_path):
    out = probe("cudnn,fa4", fake_site(tmp_path / "s", version="4.0.0b40"))
    assert out["func"] and out["skipped"] == {}
    info = out["info"]
    assert info["available"] and info["version"] == "4.0.0b40" and info["entry"] == "flash_attn.cute.flash_attn_func"
    assert info["site"] == str(tmp_path / "s")


def test_json_records_the_skip():
    sys.path.insert(0, PYTHON_DIR)
    import bench_attention_torch as b

    args = b.parser().parse_args(["--backends", "cudnn,fa4"])
    reason = "flash_attn.cute not importable: ModuleNotFoundError: No module named 'flash_attn'"
    doc = b.document(args, {"torch": "2.11"}, 1 << 30, ["cudnn", "fa4"], {"fa4": reason},
                     {"available": False, "reason": reason}, [])
    assert doc["config"]["skipped"] == {"fa4": reason} and doc["config"]["backends"] == ["cudnn", "fa4"]
    assert doc["fa4"]["available"] is False and doc["schema"] == "xstage.bench.attention.v1"
    assert "fa4" not in b.document(args, {}, 1, ["cudnn"], {}, None, [])
    assert b.result_name("fa4") == "fa4" and b.result_name("cudnn") == "torch-cudnn"


def test_bench_refuses_unknown_backends_before_torch():
    r = subprocess.run([sys.executable, str(REPO / "python" / "bench_attention_torch.py"), "--backends", "cudnn,fa5"],
                       capture_output=True, text=True, env={"PYTHONPATH": PYTHON_DIR, "PATH": "/usr/bin:/bin"},
                       timeout=60)
    assert r.returncode == 2 and "unknown backend 'fa5'" in r.stderr and "fa4" in r.stderr


# compare_attention.py with an fa4 column ------------------------------------------------------

def _check(passed=True):
    return {"checked": True, "passed": passed, "max_abs_err": 0.004, "rel_err": 0.003 if passed else 0.4,
            "rows_checked": 256, "nonfinite": 0, "rel_tol": 0.02, "reference": "fp32"}


def _cell(backend, tflops, passed=True):
    r = {"batch": 1, "seqlen": 8192, "heads": 24, "head_dim": 128, "dtype": "bf16", "causal": True,
         "tflops": tflops, "median_us": 1000.0, "nonfinite": 0, "correctness": _check(passed)}
    if backend:
        r["backend"] = backend
    return r


def _compare(tmp_path, fa4_passed=True, fa4_cells=True, skipped=None):
    ours = {"schema": "xstage.bench.attention.v1", "device": "H200", "commit": "abc",
            "results": [_cell(None, 600.0)]}
    theirs = {"schema": "xstage.bench.attention.v1", "tool": "torch-sdpa", "torch": "2.11", "cudnn": 91900,
              "device": "H200", "config": {"skipped": skipped or {}},
              "results": [_cell("torch-cudnn", 500.0)] + ([_cell("fa4", 640.0, fa4_passed)] if fa4_cells else [])}
    if fa4_cells:
        theirs["fa4"] = {"available": True, "version": "4.0.0b40", "cutlass_dsl": "4.8.1"}
    a, b, o = tmp_path / "xs.json", tmp_path / "t.json", tmp_path / "cmp.json"
    a.write_text(json.dumps(ours))
    b.write_text(json.dumps(theirs))
    r = subprocess.run([sys.executable, str(REPO / "python" / "compare_attention.py"), str(a), str(b), "--json", str(o)],
                       capture_output=True, text=True, env={"PYTHONPATH": PYTHON_DIR, "PATH": "/usr/bin:/bin"},
                       timeout=60)
    return r, (json.loads(o.read_text()) if o.exists() else None)


def test_compare_shows_the_fa4_column(tmp_path):
    r, doc = _compare(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flash-attn-4 4.0.0b40" in r.stdout and "fa4" in r.stdout
    assert "640.0" in r.stdout and "0.94" in r.stdout  # 600 / 640
    row = doc["rows"][0]
    assert row["fa4"]["ratio"] == 600.0 / 640.0 and row["fa4"]["correctness_ok"] is True
    assert doc["baseline"]["fa4"]["version"] == "4.0.0b40"


def test_compare_fails_on_a_failed_fa4_check(tmp_path):
    r, doc = _compare(tmp_path, fa4_passed=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "CORRECTNESS FAIL" in r.stdout + r.stderr and "fa4" in r.stdout + r.stderr
    assert doc["correctness"]["passed"] is False and doc["rows"][0]["fa4"]["correctness_ok"] is False


def test_compare_says_why_fa4_was_skipped(tmp_path):
    r, _ = _compare(tmp_path, fa4_cells=False, skipped={"fa4": "flash_attn.cute not importable: X"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# fa4 skipped by the baseline: flash_attn.cute not importable: X" in r.stdout


# scripts/fa4-install and scripts/fa4-bundle ---------------------------------------------------

def install(*args, env=None):
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHON": sys.executable}
    e.update(env or {})
    return subprocess.run([str(REPO / "scripts" / "fa4-install"), *args], capture_output=True, text=True, env=e,
                          timeout=120)


def test_install_fails_cleanly_without_the_archive(tmp_path):
    r = install("--archive", str(tmp_path / "none" / "fa4-site.tar.xz"), "--dest", str(tmp_path / "site"))
    assert r.returncode == 1
    assert r.stderr.strip().startswith("fa4-install: FAIL: ") and "missing" in r.stderr and "scripts/fa4-bundle" in r.stderr
    assert "\n" not in r.stderr.strip() and not (tmp_path / "site").exists()


def test_install_fails_cleanly_on_a_broken_archive(tmp_path):
    bad = tmp_path / "fa4-site.tar.xz"
    bad.write_bytes(b"not an xz file")
    r = install("--archive", str(bad), "--dest", str(tmp_path / "site"))
    assert r.returncode == 1 and "fa4-install: FAIL: cannot unpack" in r.stderr, r.stderr
    assert not (tmp_path / "site").exists() and not (tmp_path / "site.tmp").exists()


def _archive(tmp_path, site):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        for p in sorted(site.rglob("*")):
            t.add(p, arcname=str(p.relative_to(site)), recursive=False)
    d = tmp_path / "carry"
    d.mkdir()
    (d / "fa4-site.tar.xz").write_bytes(buf.getvalue())
    return d / "fa4-site.tar.xz", hashlib.sha256(buf.getvalue()).hexdigest()


def test_install_reports_the_version(tmp_path):
    arc, sha = _archive(tmp_path, fake_site(tmp_path / "src", version="4.0.0b40"))
    (arc.parent / "manifest.txt").write_text(f"archive_sha256 {sha}\n")
    r = install("--archive", str(arc), "--dest", str(tmp_path / "site"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("fa4-install: flash-attn-4 4.0.0b40 ") and "flash_attn_func importable" in r.stdout
    # The bench finds the same folder through $XSTAGE_FA4_SITE.
    r = py("import sys; sys.path.insert(0, sys.argv[1]); from xsbench import fa4; f, i, w = fa4.load(); "
           "print(i['version'])", PYTHON_DIR, env={"XSTAGE_FA4_SITE": str(tmp_path / "site")})
    assert r.returncode == 0 and r.stdout.strip() == "4.0.0b40", r.stderr


def test_install_refuses_a_checksum_mismatch(tmp_path):
    arc, _ = _archive(tmp_path, fake_site(tmp_path / "src"))
    (arc.parent / "manifest.txt").write_text("archive_sha256 " + "0" * 64 + "\n")
    r = install("--archive", str(arc), "--dest", str(tmp_path / "site"))
    assert r.returncode == 1 and "sha256" in r.stderr and "FAIL" in r.stderr


def test_install_fails_when_the_import_fails(tmp_path):
    arc, _ = _archive(tmp_path, fake_site(tmp_path / "src", broken=True))
    r = install("--archive", str(arc), "--dest", str(tmp_path / "site"))
    assert r.returncode == 1 and r.stderr.strip().startswith("fa4-install: FAIL: flash_attn.cute not importable")


def test_bundle_refuses_bad_usage():
    for args, says in ((["--limit-mib", "x"], "--limit-mib needs a whole number"), (["--bogus"], "unknown argument")):
        r = subprocess.run([str(REPO / "scripts" / "fa4-bundle"), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr, r.stderr
