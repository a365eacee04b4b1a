"""Bench JSON: load a file of a given schema, pick numbers out of records, match records
between files by key, and write JSON outputs. No torch, no numpy."""
import json
import math
import sys


class InputError(Exception):
    """An unreadable file, or one of another schema (the tools exit 2 on it)."""


def load(path, schema, results=True):
    """The document at `path`, which must be a JSON object with "schema" == `schema` (a str
    or a tuple of accepted ones) and (results=True) a list "results" (non-object entries
    dropped)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {path}: {e}")
    accepted = (schema,) if isinstance(schema, str) else tuple(schema)
    if not isinstance(doc, dict) or doc.get("schema") not in accepted:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"{path} is not {' or '.join(accepted)} (schema {got!r})")
    if not results:
        return doc
    res = doc.get("results", [])
    if not isinstance(res, list):
        raise InputError(f"{path}: 'results' is not a list")
    doc["results"] = [r for r in res if isinstance(r, dict)]
    return doc


def load_or_exit(tool, path, schema, results=True, code=2):
    """load(), or exit with `code` after '<tool>: <why>' on stderr (for the plot scripts)."""
    try:
        return load(path, schema, results)
    except InputError as e:
        print(f"{tool}: {e}", file=sys.stderr)
        sys.exit(code)


def num(x):
    """A finite number as float, else None (missing fields, strings, NaN, booleans)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def pos(x):
    """A finite number > 0, else None."""
    x = num(x)
    return x if x is not None and x > 0 else None


def ratio(a, b):
    """a / b for positive finite a and b, else None."""
    a, b = pos(a), pos(b)
    return a / b if a is not None and b is not None else None


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def safe_key(keyfn, rec):
    """keyfn(rec), or None where a field is missing or malformed."""
    try:
        return keyfn(rec)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def index(records, keyfn, keep="first", where=None):
    """{key: record} over `records` whose key computes (and for which where(record) holds);
    with duplicates the first (keep="first") or the last (keep="last") record wins."""
    out = {}
    for r in records:
        if where is not None and not where(r):
            continue
        k = safe_key(keyfn, r)
        if k is None:
            continue
        if keep == "last" or k not in out:
            out[k] = r
    return out


def group(records, keyfn):
    """{key: [records]} in first-seen order of the keys."""
    out = {}
    for r in records:
        k = safe_key(keyfn, r)
        if k is not None:
            out.setdefault(k, []).append(r)
    return out


def best_rate(docs, keyfn, field="tflops", where=None):
    """{key: the largest `field` over the records of `docs` with that key (and for which
    where(record) holds)}."""
    out = {}
    for doc in docs:
        for r in doc["results"]:
            if where is not None and not where(r):
                continue
            k, v = safe_key(keyfn, r), num(r.get(field))
            if k is not None and v is not None:
                out[k] = max(out.get(k, v), v)
    return out


def write_json(path, doc, indent=2):
    """Writes `doc` (strict JSON: NaN/inf are written as null); raises InputError on failure."""
    try:
        with open(path, "w") as f:
            json.dump(_finite(doc), f, indent=indent)
            f.write("\n")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e}")


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x
