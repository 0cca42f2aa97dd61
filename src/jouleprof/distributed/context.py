"""Where this process stands in a torchrun job: rank, local rank, world size, its GPU.

Read from the environment torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE), so it
needs no process group and imports no torch: `jouleprof measure` and `jouleprof.profile` call it
before the user's code has initialized anything.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

SIM_GPUS_ENV = "JOULEPROF_SIM_GPUS"
"""Testing aid: this many simulated GPUs are visible to the job (each rank measures its own,
local rank 0 also the ones no rank was given); see distributed.simgpu."""
SIM_SHARED_ENV = "JOULEPROF_SIM_SHARE_GPU"
"""Testing aid: every rank is placed on simulated GPU 0 (ranks sharing one board)."""


@dataclass(frozen=True)
class RankContext:
    """This process's place in a distributed job."""

    rank: int
    """Global rank (RANK)."""
    local_rank: int
    """Rank on this host (LOCAL_RANK)."""
    world_size: int
    """Processes in the job (WORLD_SIZE)."""
    local_world_size: int
    """Processes on this host (LOCAL_WORLD_SIZE)."""
    host: str
    """This host's name."""
    job_id: str
    """An id every rank of the job shares (TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT)."""

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"RANK={self.rank} is outside WORLD_SIZE={self.world_size}")
        if not 0 <= self.local_rank < self.local_world_size:
            raise ValueError(
                f"LOCAL_RANK={self.local_rank} is outside LOCAL_WORLD_SIZE={self.local_world_size}"
            )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0


def current(environ: Mapping[str, str] | None = None) -> RankContext | None:
    """The job this process belongs to; None when not under torchrun (or a world of one)."""
    env = os.environ if environ is None else environ
    try:
        world = int(env.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(f"WORLD_SIZE must be an integer, got {env.get('WORLD_SIZE')!r}") from None
    if world <= 1 or "RANK" not in env:
        return None
    try:
        rank = int(env["RANK"])
        local_rank = int(env.get("LOCAL_RANK", env["RANK"]))
        local_world = int(env.get("LOCAL_WORLD_SIZE", str(world)))
    except ValueError as e:
        raise ValueError(
            f"torchrun's RANK/LOCAL_RANK/LOCAL_WORLD_SIZE are not integers: {e}"
        ) from None
    job = env.get("TORCHELASTIC_RUN_ID") or ""
    if not job or job == "none":
        job = f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
    return RankContext(rank, local_rank, world, local_world, socket.gethostname(), job)


def visible_gpu_count(environ: Mapping[str, str] | None = None) -> int | None:
    """GPUs this process may use: the simulated ones when asked for, else CUDA_VISIBLE_DEVICES's
    length, else NVML's count; None when that cannot be told without touching a GPU."""
    env = os.environ if environ is None else environ
    if env.get(SIM_GPUS_ENV):
        return int(env[SIM_GPUS_ENV])
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return len([x for x in cvd.split(",") if x.strip() and x.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def rank_gpu(
    ctx: RankContext, n_visible: int | None, environ: Mapping[str, str] | None = None
) -> int:
    """The user-visible index of the GPU this rank computes on: its local rank, wrapped around
    the visible GPUs when there are fewer GPUs than ranks (ranks then share boards)."""
    env = os.environ if environ is None else environ
    if env.get(SIM_SHARED_ENV):
        return 0
    if not n_visible:
        return ctx.local_rank
    return ctx.local_rank % n_visible
