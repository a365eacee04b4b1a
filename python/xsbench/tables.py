"""Table formatting shared by the compare scripts: '-' for a missing number, fixed-width
columns, markdown tables, the header line naming the two runs, and the FAILED mark of a cell
whose correctness failed."""

FAILED_MARK = "  FAILED(correctness)"


def fmt(x, spec=".1f", width=0):
    """`x` formatted with `spec`, '-' for None, right-aligned in `width`."""
    return f"{'-' if x is None else format(x, spec):>{width}}"


def columns(cells, widths, lead=" "):
    """One fixed-width line: cells right-aligned to their widths, separated by a space."""
    return lead + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths))


def md_table(header, rows):
    """Lines of a markdown table, numbers right-aligned."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def mark(line, ok):
    """`line`, with the FAILED mark when the cell's correctness failed."""
    return line if ok else line + FAILED_MARK


def run_desc(doc, fields=("device", "commit")):
    """'device X, commit Y' from the fields of a bench document (missing ones left out)."""
    return ", ".join(f"{f} {doc.get(f)}" for f in fields if doc.get(f) is not None)


def pair_header(lead, names, width, tail):
    """A header line: `lead`, then for each name the name (right-aligned to `width`) and a
    'ratio' column, then `tail`."""
    return lead + "".join(f" {n:>{width}} {'ratio':>6}" for n in names) + tail
