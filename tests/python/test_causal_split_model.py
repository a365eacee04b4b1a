"""tools/causal_split_model.py: the launch-length model of a causal key split (a model, not a
measurement). The causal key blocks per q tile, the LPT makespan, part costs that sum to the
tile plus their overheads, parts that respect --min-part / --max-parts, the one issue-38 shape
where every CTA holds one tile (S = 2048, 8 heads) predicted to gain, a long shape not, and bad
arguments refused."""
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import causal_split_model as csm  # noqa: E402


def test_key_blocks_are_the_causal_prefix():
    assert [csm.key_blocks(m, 128, 128, 2048) for m in range(16)] == list(range(1, 17))
    assert csm.key_blocks(10, 192, 128, 2048) == 16           # the last 192-row tile holds rows 1920..2047


def test_makespan_is_lpt():
    assert csm.makespan([5, 4, 3, 3, 3], 2) == 10  # 5 | 4, then 4+3, 5+3, 7+3: LPT's 10, not the optimum 9
    assert csm.makespan([7, 1], 4) == 7


def test_parts_cover_the_tile():
    for b in (4, 9, 16):
        for k in (1, 2, 3, 4):
            c = csm.parts_cost(b, k)
            assert len(c) == k and sum(c) == b + (1 if k == 1 else 2 * k)


def test_the_one_tile_per_cta_shape_gains_and_a_long_one_does_not():
    tiles = [csm.key_blocks(m, 128, 128, 2048) for m in range(16)] * 8
    whole, split, k = csm.plan(tiles, 132, 4, 4)
    assert whole == 17 and split < whole and max(k) <= 4
    assert all(b // kk >= 4 for b, kk in zip(tiles, k) if kk > 1)
    long_tiles = [csm.key_blocks(m, 128, 128, 16384) for m in range(128)] * 16
    whole, split, k = csm.plan(long_tiles, 132, 4, 4)
    assert split == whole and max(k) == 1


def test_cli_prints_a_row_per_shape_and_refuses_bad_input():
    tool = str(REPO / "tools" / "causal_split_model.py")
    r = subprocess.run([sys.executable, tool, "--seqs", "2048", "--heads", "8,16"], capture_output=True, text=True)
    assert r.returncode == 0 and "model only" in r.stdout
    assert len([line for line in r.stdout.splitlines() if line.strip().startswith("2048")]) == 2
    r = subprocess.run([sys.executable, tool, "--seqs", "0"], capture_output=True, text=True)
    assert r.returncode == 2
