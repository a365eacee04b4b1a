"""xstage.team: a C++ team built from a torch.distributed process group (the NCCL id travels
through the group). One process on one GPU here; the multi-rank path runs under torchrun."""
import pytest

from conftest import HAVE_TORCH, ext_has, needs_torch

pytestmark = [needs_torch, pytest.mark.skipif(not ext_has("team"), reason="the extension has no Team binding")]

if HAVE_TORCH:
    import torch


def test_needs_an_initialised_group():
    import torch.distributed as dist

    from xstage import team

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(ValueError) as e:
        team.team_for()
    assert "\n" not in str(e.value)


def test_unique_id_is_nccl_sized():
    from xstage import _ext

    assert len(_ext.load().Team.new_unique_id()) == 128


@pytest.mark.gpu
def test_single_rank_team_from_a_process_group(tmp_path):
    import torch.distributed as dist

    from xstage import team

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        t = team.team_for()
        assert (t.world_size, t.rank, t.device) == (1, 0, torch.cuda.current_device())
        assert team.team_for() is t                     # cached per group
        t.check_device_status()
        team.release()
        assert t.closed
    finally:
        dist.destroy_process_group()
