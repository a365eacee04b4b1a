"""python/compare_moe_tiles.py on a synthetic bench file (no GPU, no binary): mean rows per
expert, each tile's better order, the automatic rule against the unfused layer, and the problems
it must refuse (a missing variant, a failed check, an unknown model)."""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "compare_moe_tiles", pathlib.Path(__file__).resolve().parents[2] / "python" / "compare_moe_tiles.py")
tiles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiles)

LISTING = """model                hidden intermediate experts top-k shared
Big                    4096         2048     256     8      1
Small                  1408         5632      16     2      2
"""


def _doc(us, check="ok"):
    res = []
    for (model, tokens), v in us.items():
        for variant, t in v.items():
            res.append({"model": model, "routing": "balanced", "tokens_per_rank": tokens, "variant": variant,
                        "median_us": t, "check": check})
    return {"world": 1, "results": res}


def _cells(unf, il64, ew64, il128, ew128):
    return {"unfused": unf, "interleaved+m64n256": il64, "expert-wave+m64n256": ew64,
            "interleaved+m128n256": il128, "expert-wave+m128n256": ew128}


def test_shapes_parse_from_the_list():
    assert tiles.parse_shapes(LISTING) == {"Big": (256, 8), "Small": (16, 2)}


def test_rows_per_expert_better_orders_and_sorting():
    doc = _doc({("Big", 2048): _cells(100, 90, 95, 80, 85), ("Small", 512): _cells(10, 12, 11, 13, 14)})
    rows, probs = tiles.table(doc, tiles.parse_shapes(LISTING))
    assert probs == []
    # Big 2048: 2048 * 8 / 256 = 64 rows; Small 512: 512 * 2 / 16 = 64 too: sorted by rows, then name.
    assert rows == [(64.0, "Big", "balanced", 2048, 90, 80, 100), (64.0, "Small", "balanced", 512, 11, 13, 10)]


def test_missing_variant_failed_check_and_unknown_model_are_problems():
    v = _cells(100, 90, 95, 80, 85)
    del v["expert-wave+m128n256"]
    _, probs = tiles.table(_doc({("Big", 2048): v}), tiles.parse_shapes(LISTING))
    assert len(probs) == 1 and "expert-wave+m128n256" in probs[0]
    _, probs = tiles.table(_doc({("Big", 2048): _cells(1, 1, 1, 1, 1)}, check="FAIL"), tiles.parse_shapes(LISTING))
    assert probs and all("check FAIL" in p for p in probs)
    _, probs = tiles.table(_doc({("Other", 2048): _cells(1, 1, 1, 1, 1)}), tiles.parse_shapes(LISTING))
    assert probs == ["Other: not a model of the binary's --list"]
