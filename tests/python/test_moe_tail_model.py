"""tools/moe_tail_model.py: its orders are valid lists and its list scheduling is exact on small
cases worked by hand."""
import importlib.util
import pathlib

import pytest

_spec = importlib.util.spec_from_file_location(
    "moe_tail_model", pathlib.Path(__file__).resolve().parents[2] / "tools" / "moe_tail_model.py")
m = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(m)


@pytest.mark.parametrize("tail", [0, 1, 3, 100])
def test_interleaved_orders_every_tile_once_linear2_after_its_inputs(tail):
    blocks, n1, n2 = 7, 5, 3
    o = m.interleaved(blocks, n1, n2, 2, 4, tail)
    assert sorted(o) == sorted([(1, b) for b in range(blocks) for _ in range(n1)] +
                               [(2, b) for b in range(blocks) for _ in range(n2)])
    for i, (kind, b) in enumerate(o):
        if kind == 2:
            assert sum(1 for k, bb in o[:i] if k == 1 and bb == b) == n1
    first_tail = max(0, blocks - tail) if tail else blocks
    k = (blocks - first_tail) * n2
    if k:  # the tail blocks' Linear-2 tiles end the list, after every Linear-1 tile
        assert o[-k:] == [(2, b) for b in range(first_tail, blocks) for _ in range(n2)]
        assert all(kind == 2 for kind, _ in o[len(o) - k:])


def test_simulate_by_hand():
    # 2 CTAs; block 0: two Linear-1 tiles (1 us) then one Linear-2 tile (3 us), q = 0.5:
    # both Linear-1 tiles end at 1, the Linear-2 tile starts at 1.5 and ends at 4.5; the other
    # CTA idles from 1: mean idle (0 + 3.5) / 2.
    mk, idle = m.simulate([(1, 0), (1, 0), (2, 0)], 2, 1.0, 3.0, 0.5, 1, 2)
    assert mk == pytest.approx(4.5)
    assert idle == pytest.approx(1.75)
    with pytest.raises(ValueError):
        m.simulate([(2, 0), (1, 0)], 1, 1.0, 1.0, 0.0, 1, 1)


def test_bad_input_exits_2(capsys):
    assert m.main(["--blocks", "3", "--n1", "2", "--n2", "1", "--t1", "1", "--t2", "0"]) == 2
    assert m.main(["--blocks", "3", "--n1", "2", "--n2", "1", "--t1", "1", "--t2", "2", "--blocks-per-expert", "2"]) == 2
    assert m.main(["--blocks", "4", "--n1", "2", "--n2", "1", "--t1", "1", "--t2", "2", "--ctas", "2"]) == 0
    assert "not a measurement" in capsys.readouterr().out
