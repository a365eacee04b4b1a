"""The correctness gate every compare/acceptance checker applies before it reads a timing.

A result cell fails when (rules in docs/checkers.md):
  - its correctness record is missing: no "correctness" object in the cell (a missing record
    is allowed only under --allow-missing-correctness, which warns loudly);
  - the record says it was not checked ("checked": false), has no pass flag, or its pass flag
    ("passed", "pass" or "ok") is not true;
  - the record's "nonfinite" is not 0, "finite" is false, "rows_checked" is 0, or an error
    field ("max_abs_err", "rel_err") is null/NaN or above the tolerance the record carries
    ("rel_tol"/"limit"/"tolerance", "abs_tol"/"atol");
  - the cell itself carries a non-zero "nonfinite", a non-zero mismatch count (any field whose
    name starts with "mismatch", e.g. "mismatch_vs_serial": {"fused": 3}), or an "errors"
    object naming a variant that failed;
  - the file's own checks ("checks": [...], or a file-level "correctness" record) include a
    failed one: every cell of that file then fails (a baseline whose own check failed).
A record may also be an object of per-variant records ({"fused": {...}, "serial": {...}}).
"""
import sys

from .results import num

PASS_KEYS = ("passed", "pass", "ok")
REL_TOL_KEYS = ("rel_tol", "rel_err_limit", "limit", "tolerance")
ABS_TOL_KEYS = ("abs_tol", "atol", "max_abs_err_limit")
RECORD_KEYS = PASS_KEYS + ("checked", "max_abs_err", "rel_err", "rows_checked")
MAX_LISTED = 20  # failure lines printed per file; the rest are counted

ALLOW_HELP = ("accept cells without a correctness record (prints a loud warning; never for acceptance: their "
              "numbers are not verified)")


def _count(x):
    """A count as int (None when absent/malformed)."""
    v = num(x)
    return int(v) if v is not None else None


def _first(rec, keys):
    for k in keys:
        if k in rec:
            return k, rec[k]
    return None, None


def record_problems(rec, where="correctness"):
    """What is wrong with one correctness record (a dict); [] when it passed."""
    if not isinstance(rec, dict):
        return [f"{where} is not an object ({type(rec).__name__})"]
    if not any(k in rec for k in RECORD_KEYS):
        # An object of per-variant records.
        subs = [(k, v) for k, v in rec.items() if isinstance(v, dict)]
        if not subs:
            return [f"{where} has no pass flag"]
        out = []
        for k, v in subs:
            out += record_problems(v, f"{where}[{k}]")
        return out
    out = []
    if rec.get("checked") is False:
        out.append(f"{where}: not checked (checked: false)")
    key, passed = _first(rec, PASS_KEYS)
    if key is None:
        out.append(f"{where}: no pass flag")
    elif passed is not True:
        out.append(f"{where}: check failed ({key}: {str(passed).lower()})")
    nf = rec.get("nonfinite", 0)
    if _count(nf) != 0:
        out.append(f"{where}: {nf} non-finite outputs")
    if rec.get("finite") is False:
        out.append(f"{where}: non-finite outputs (finite: false)")
    if "rows_checked" in rec and (_count(rec["rows_checked"]) or 0) <= 0:
        out.append(f"{where}: rows_checked {rec['rows_checked']!r} (nothing compared)")
    for field, tol_keys in (("rel_err", REL_TOL_KEYS), ("max_abs_err", ABS_TOL_KEYS)):
        if field not in rec:
            continue
        v = num(rec[field])
        if v is None:
            out.append(f"{where}: {field} is {rec[field]!r} (not a finite number)")
            continue
        tk, tol = _first(rec, tol_keys)
        if tk is not None and num(tol) is not None and v > num(tol):
            out.append(f"{where}: {field} {v:.3g} over its tolerance {tk} {num(tol):.3g}")
    for k, v in rec.items():
        if k.startswith("mismatch") and _count(v) != 0:
            out.append(f"{where}: {k} = {v}")
    return out


def cell_problems(rec):
    """(problems, missing) of one result cell: the failures found, and whether it lacks a
    correctness record (reported separately, so --allow-missing-correctness can waive it)."""
    out = []
    nf = rec.get("nonfinite")
    if nf is not None and _count(nf) != 0:
        out.append(f"nonfinite = {nf}")
    for k, v in rec.items():
        if not k.startswith("mismatch"):
            continue
        if isinstance(v, dict):
            for variant, n in v.items():
                if _count(n) != 0:
                    out.append(f"{k}[{variant}] = {n}")
        elif _count(v) != 0:
            out.append(f"{k} = {v}")
    errors = rec.get("errors")
    if isinstance(errors, dict) and errors:
        for variant, msg in errors.items():
            out.append(f"{variant} failed: {str(msg)[:160]}")
    elif errors:
        out.append(f"errors: {str(errors)[:160]}")
    if "correctness" not in rec or rec["correctness"] is None:
        return out, True
    return out + record_problems(rec["correctness"]), False


def describe_check(c):
    """A short name of a file-level check entry: its key fields."""
    keys = ("model", "weights", "routing", "tokens_per_rank", "op", "tokens_per_expert", "seq_len", "heads",
            "head_dim", "seqlen", "world", "gemm_path")
    parts = [f"{k}={c[k]}" for k in keys if isinstance(c, dict) and k in c]
    return "check " + (" ".join(parts) if parts else "(unnamed)")


def file_problems(doc):
    """Failures of a file's own checks ("checks" list, file-level "correctness" record)."""
    out = []
    checks = doc.get("checks")
    if checks is not None and not isinstance(checks, list):
        out.append("'checks' is not a list")
    for c in checks or []:
        for p in record_problems(c, describe_check(c)):
            out.append(p)
    if doc.get("correctness") is not None:
        out += record_problems(doc["correctness"], "file correctness")
    return out


class Gate:
    """Collects the correctness failures of the cells a checker uses and prints one line per
    failing cell: `CORRECTNESS FAIL <role> <cell>: <why>`."""

    def __init__(self, tool, allow_missing=False, out=None):
        self.tool, self.allow_missing = tool, allow_missing
        self.out = out or sys.stdout
        self.failed = {}         # (role, key) -> [reasons]
        self.missing = {}        # role -> [cell labels] (waived under allow_missing)
        self.file_failed = {}    # role -> [reasons]
        self.cells = 0
        self.printed = {}

    def _line(self, role, text):
        n = self.printed.get(role, 0)
        self.printed[role] = n + 1
        if n < MAX_LISTED:
            print(text, file=self.out)
        elif n == MAX_LISTED:
            print(f"CORRECTNESS FAIL {role}: ... (further failures of this file counted, not listed)", file=self.out)

    def check_file(self, role, doc):
        """The file's own checks; a failed one fails every cell of the file."""
        probs = file_problems(doc)
        if probs:
            self.file_failed[role] = probs
            for p in probs:
                self._line(role, f"CORRECTNESS FAIL {role} file: {p}")
        return not probs

    def check_cell(self, role, key, label, rec):
        """Checks one cell (a result record); True when it passes. `key` identifies the cell
        for cell_ok(), `label` names it in the report."""
        self.cells += 1
        probs, missing = cell_problems(rec)
        if missing:
            self.missing.setdefault(role, []).append(label)
            if not self.allow_missing:
                probs = ["no correctness record"] + probs
        if role in self.file_failed:
            probs.append("its file's own correctness check failed")
        if probs:
            self.failed.setdefault((role, key), []).extend(probs)
            self._line(role, f"CORRECTNESS FAIL {role} {label}: {'; '.join(probs)}")
        return not probs

    def check_cells(self, role, records, keyfn, labelfn, where=None):
        """check_cell over `records` (those whose key computes and where(record) holds);
        labelfn(key, record) names a cell."""
        from .results import safe_key
        for r in records:
            if where is not None and not where(r):
                continue
            k = safe_key(keyfn, r)
            if k is not None:
                self.check_cell(role, k, labelfn(k, r), r)

    def cell_ok(self, role, key):
        return (role, key) not in self.failed

    def record_ok(self, rec):
        """For cells keyed by the record itself (key id(record)): did it pass?"""
        if not hasattr(self, "_failed_ids"):
            self._failed_ids = {k for _, k in self.failed}
        return id(rec) not in self._failed_ids

    @property
    def ok(self):
        return not self.failed and not self.file_failed

    def header(self):
        """The loud warning of --allow-missing-correctness (call after the checks)."""
        if self.allow_missing and self.missing:
            n = sum(len(v) for v in self.missing.values())
            print(f"WARNING: --allow-missing-correctness: {n} cells have NO correctness record "
                  f"({', '.join(f'{r}: {len(v)}' for r, v in self.missing.items())}); their numbers are NOT "
                  f"verified and this run cannot count for acceptance", file=self.out)

    def verdict(self):
        """'N cells pass' / 'N cells, none failed; M WITHOUT a record ...' / 'F of N cells failed'."""
        if not self.ok:
            return f"FAIL: {len(self.failed)} of {self.cells} cells failed"
        waived = sum(len(v) for v in self.missing.values()) if self.allow_missing else 0
        if waived:
            return (f"{self.cells} cells, none failed; {waived} WITHOUT a record (NOT verified, waived by "
                    f"--allow-missing-correctness)")
        return f"{self.cells} cells checked, all pass"

    def summary(self):
        """The closing line; the exit status contribution (0 ok, 1 correctness failed)."""
        if self.ok:
            print(f"# correctness: {self.verdict()}", file=self.out)
            return 0
        files = f"; file checks failed: {', '.join(self.file_failed)}" if self.file_failed else ""
        print(f"# correctness: {self.verdict()}{files} (CORRECTNESS FAIL lines above); "
              f"{self.tool} exits 1", file=self.out)
        return 1


def add_flag(ap):
    """--allow-missing-correctness on an argparse parser."""
    ap.add_argument("--allow-missing-correctness", action="store_true", help=ALLOW_HELP)
