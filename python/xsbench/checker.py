"""The frame of a compare script: load its inputs (exit 2 on an unreadable file or another
schema, with the tool's name), run the correctness gate over the cells it will use, and merge
the gate's verdict into the exit status."""
import sys

from .correctness import Gate
from .results import InputError, load


def open_inputs(tool, specs):
    """[doc, ...] for [(path, schema), ...] (path None gives None), or None after printing why
    on stderr (the caller returns 2)."""
    try:
        return [load(p, s) if p is not None else None for p, s in specs]
    except InputError as e:
        print(f"{tool}: {e}", file=sys.stderr)
        return None


def gate_files(tool, args, files, out=None):
    """A Gate over `files`: [(role, doc, keyfn, labelfn, where)], each file's own checks first,
    then every cell the checker uses. Prints the failures (and the --allow-missing-correctness
    warning) before anything else."""
    gate = Gate(tool, allow_missing=getattr(args, "allow_missing_correctness", False), out=out)
    for role, doc, keyfn, labelfn, where in files:
        if doc is None:
            continue
        gate.check_file(role, doc)
        gate.check_cells(role, doc["results"], keyfn, labelfn, where)
    gate.header()
    return gate


def write_out(tool, path, writer):
    """writer(path); 0, or 2 after printing why the file could not be written."""
    try:
        writer(path)
    except (OSError, InputError) as e:
        print(f"{tool}: cannot write {path}: {e}", file=sys.stderr)
        return 2
    return 0


def gate_records(tool, args, files):
    """A Gate over every record of `files` [(role, doc)], each record its own cell (key: the
    record itself; Gate.record_ok(record) asks for it), named by xsbench.keys.moe_gemm_label
    where the record has those fields, else by its position."""
    from .keys import moe_gemm_label
    from .results import safe_key

    def label(_k, r):
        return safe_key(moe_gemm_label, r) or "a result without model/op/tokens_per_expert"
    return gate_files(tool, args, [(role, doc, id, label, None) for role, doc in files])


def parse_and_open(tool, ap, argv, specs):
    """Adds --allow-missing-correctness to `ap`, parses argv and opens specs(args) (see
    open_inputs): (args, docs), docs None after an unreadable input (the caller returns 2)."""
    from .correctness import add_flag
    add_flag(ap)
    args = ap.parse_args(argv)
    return args, open_inputs(tool, specs(args))


def parse_and_open_pair(tool, description, argv, schema, json_help, add_args=None):
    """The command line of the checkers that compare an xstage JSON with a PyTorch one
    (XSTAGE_JSON TORCH_JSON [--json OUT], both of `schema`; add_args(parser) adds a tool's own
    options): (args, ours, theirs), or None after an unreadable input (the caller returns 2)."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("xstage_json")
    ap.add_argument("torch_json")
    ap.add_argument("--json", help=json_help)
    if add_args is not None:
        add_args(ap)
    args, docs = parse_and_open(tool, ap, argv, lambda a: [(a.xstage_json, schema), (a.torch_json, schema)])
    return None if docs is None else (args, *docs)
