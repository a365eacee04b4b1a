"""The MoE model shapes of bench/moe-models.json: the one table that the C++ code embeds at build
time (moe::model_shapes()) and the PyTorch baselines read here, so both run the same models in
the same order. Torch-free, standard library only.

    python3 python/xsbench/moe_models.py    # prints the table, one model per line
                                            # (tests/cpu/test_moe_models.cpp compares it with C++)
"""
import json
import os

# Relative to this file, so the tools work from any working directory.
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench", "moe-models.json")

# A row's fields, in the order of the file and of moe::ModelShape.
FIELDS = ("name", "hidden", "intermediate", "experts", "top_k", "shared", "shared_intermediate")


def shapes(path=PATH):
    """The models as dicts with the FIELDS, in the file's order."""
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["models"]
    for r in rows:
        missing = [k for k in FIELDS if k not in r]
        if missing:
            raise ValueError(f"{path}: model {r.get('name', '?')!r} lacks {missing}")
    return rows


def rows(*fields, path=PATH):
    """One tuple per model with the named fields, e.g. rows("name", "hidden") ->
    [("DiT-MoE-G", 1408), ...]."""
    return [tuple(m[k] for k in fields) for m in shapes(path)]


def main():
    print("# " + " ".join(FIELDS))
    for r in rows(*FIELDS):
        print(" ".join(str(x) for x in r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
