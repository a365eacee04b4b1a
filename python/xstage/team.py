"""Teams of GPUs from torch.distributed process groups.

``team_for(group)`` builds an ``xstage._C.Team`` (the C++ ``xstage::Team``: one rank per GPU,
NCCL communicator, symmetric windows, device-side waits with timeouts) for the calling rank of
``group``: rank 0 of the group creates the NCCL unique id, the group broadcasts it (no second
rendezvous port), and every rank joins on its current CUDA device. Teams are cached per group
and released at interpreter exit (or by ``release(group)``; collective: every rank calls it).
Works under torchrun with one process per GPU.
"""
from __future__ import annotations

import atexit
import threading

from . import _ext

__all__ = ["team_for", "release", "release_all"]

_lock = threading.Lock()
_teams: dict = {}  # group key -> (group, team)


def _fail(exc: type, msg: str):
    raise exc(f"xstage.team: {msg}")


def _key(group):
    return id(group)


def team_for(group=None, *, wait_timeout_s: float = 5.0):
    """The xstage team of this rank in ``group`` (None: the default group)."""
    import torch
    import torch.distributed as dist

    C = _ext.load()
    if not getattr(C, "has_team", False):
        _fail(NotImplementedError, "this build of xstage._C has no Team binding (team.hpp without "
              "Team::from_unique_id)")
    if not (dist.is_available() and dist.is_initialized()):
        _fail(ValueError, "torch.distributed is not initialised (init_process_group first, e.g. under torchrun)")
    if group is None:
        group = dist.group.WORLD
    with _lock:
        hit = _teams.get(_key(group))
        if hit is not None and not hit[1].closed:
            return hit[1]
    if not torch.cuda.is_available():
        _fail(ValueError, "no CUDA device is visible")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device = torch.cuda.current_device()
    uid = [C.Team.new_unique_id() if rank == 0 else None]
    src = dist.get_global_rank(group, 0) if group is not dist.group.WORLD else 0
    dist.broadcast_object_list(uid, src=src, group=group)
    if not isinstance(uid[0], (bytes, bytearray)):
        _fail(RuntimeError, "the NCCL unique id did not arrive through the group")
    team = C.Team.from_unique_id(rank, world, device, bytes(uid[0]), wait_timeout_s)
    with _lock:
        _teams[_key(group)] = (group, team)
    return team


def release(group=None) -> None:
    """Release the cached team of ``group`` (collective: every rank of the group calls it).
    Operators built on it (UlyssesAttention / ExpertParallelMoE layers: ``close()`` them) must
    be gone first; otherwise ValueError says how many remain and the team stays."""
    import torch.distributed as dist

    if group is None and dist.is_available() and dist.is_initialized():
        group = dist.group.WORLD
    with _lock:
        hit = _teams.get(_key(group))
    if hit is not None:
        hit[1].close()  # raises while operators still use it
        with _lock:
            _teams.pop(_key(group), None)


def release_all() -> None:
    with _lock:
        items = list(_teams.values())
        _teams.clear()
    for _, team in items:
        try:
            team.close()
        except Exception:  # at exit: never turn teardown into a crash
            pass


atexit.register(release_all)
