"""How the BERT workload spreads over GPUs: none, DDP, FSDP2 (`fully_shard`), tensor parallel.

Every check that can fail runs before any GPU work (`check_before_gpu_work`, then
`check_ranks_agree` as the first collective), so a bad launch ends with one clear message.
With one process and a strategy other than none, a single-rank process group is made (the
wrapper's own cost on one GPU is then measurable).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jouleprof.errors import ConfigError


@dataclass
class Group:
    """The process group the strategy runs on (world 1 when launched without torchrun)."""

    rank: int
    world_size: int
    backend: str
    owns: bool
    """This module initialized the default group (and destroys it)."""
    store_file: str | None = None


def check_before_gpu_work(cfg, ctx) -> None:
    """Refuse what cannot run, before touching a GPU: a strategy needing more GPUs than are
    visible, tensor-parallel degrees the model cannot be split by, several processes with
    strategy none.

    Raises:
        ConfigError: with the field at fault and what to change.
    """
    from jouleprof.distributed.context import SIM_SHARED_ENV, visible_gpu_count

    world = ctx.world_size if ctx is not None else 1
    local_world = ctx.local_world_size if ctx is not None else 1
    if cfg.strategy == "none" and world > 1:
        raise ConfigError(
            f"strategy 'none' trains one process but torchrun started {world}: "
            "choose --strategy ddp, fsdp or tp, or launch one process"
        )
    n_visible = visible_gpu_count()
    if n_visible and local_world > n_visible and not os.environ.get(SIM_SHARED_ENV):
        raise ConfigError(
            f"strategy {cfg.strategy!r} with {local_world} processes on this host needs "
            f"{local_world} GPUs, but {n_visible} are visible (CUDA_VISIBLE_DEVICES): "
            f"use --nproc-per-node {n_visible} or make more GPUs visible"
        )
    if cfg.strategy == "tp":
        for name in ("hidden", "heads"):
            v = getattr(cfg, name)
            if v % world:
                raise ConfigError(
                    f"tensor parallelism over {world} GPUs splits {name} ({v}) {world} ways: "
                    f"choose {name} divisible by {world}, or another degree"
                )
        if cfg.intermediate % world:
            raise ConfigError(f"intermediate size {cfg.intermediate} is not divisible by {world}")


def init_distributed(cfg, ctx, device) -> Group | None:
    """The default process group for the strategy (nccl on GPUs, gloo on CPU); None for none."""
    if cfg.strategy == "none":
        return None
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    if dist.is_initialized():
        return Group(dist.get_rank(), dist.get_world_size(), dist.get_backend(), owns=False)
    kw: dict[str, Any] = {}
    if device.type == "cuda":
        kw["device_id"] = device
    if ctx is None:
        fd, path = tempfile.mkstemp(prefix="jouleprof-pg-")
        os.close(fd)
        os.unlink(path)
        dist.init_process_group(backend, init_method=f"file://{path}", rank=0, world_size=1, **kw)
        return Group(0, 1, backend, owns=True, store_file=path)
    dist.init_process_group(backend, **kw)
    return Group(dist.get_rank(), dist.get_world_size(), backend, owns=True)


def check_ranks_agree(cfg, group: Group | None) -> None:
    """Every rank runs the same configuration, or none starts (the first collective)."""
    if group is None or group.world_size == 1:
        return
    import torch.distributed as dist

    mine = cfg.to_json()
    allc: list[Any] = [None] * group.world_size
    dist.all_gather_object(allc, mine)
    diff = sorted({k for c in allc for k in mine if c.get(k) != mine.get(k)})
    if diff:
        detail = "; ".join(
            f"{k}: " + ", ".join(f"rank {r}={c.get(k)!r}" for r, c in enumerate(allc)) for k in diff
        )
        raise ConfigError(
            f"ranks disagree on the configuration ({detail}): launch every rank "
            "with the same arguments"
        )


def agreement(group: Group | None) -> Callable[[float, str], float]:
    """value, "min"|"max" → that reduction over the ranks (identity on one process)."""
    if group is None or group.world_size == 1:
        return lambda v, op: v
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device()) if group.backend == "nccl" else None

    def reduce(value: float, op: str) -> float:
        t = torch.tensor([float(value)], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MIN if op == "min" else dist.ReduceOp.MAX)
        return float(t.item())

    return reduce


def data_seed(cfg, group: Group | None) -> int:
    """Batches differ between data-parallel ranks and are equal within a tensor-parallel group."""
    if group is None or cfg.strategy == "tp":
        return cfg.seed
    return cfg.seed + 1000 * group.rank


def wrapper(cfg, group: Group | None, device) -> Callable[[Any], Any] | None:
    """The function that turns the built model into the strategy's model."""
    if cfg.strategy == "none":
        return None
    if cfg.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return lambda m: DDP(m, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (group.world_size,))
    if cfg.strategy == "fsdp":
        return lambda m: _fsdp(m, mesh)
    return lambda m: _tp(m, mesh)


def _fsdp(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for layer in model.bert.encoder.layer:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _tp(model, mesh):
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {
        "attention.self.query": ColwiseParallel(),
        "attention.self.key": ColwiseParallel(),
        "attention.self.value": ColwiseParallel(),
        "attention.output.dense": RowwiseParallel(),
        "intermediate.dense": ColwiseParallel(),
        "output.dense": RowwiseParallel(),
    }
    for layer in model.bert.encoder.layer:
        parallelize_module(layer, mesh, plan)
    return model


def barrier(group: Group | None) -> None:
    if group is not None and group.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def destroy(group: Group | None) -> None:
    if group is None or not group.owns:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    if group.store_file:
        with contextlib.suppress(OSError):
            os.unlink(group.store_file)
