"""The video classifiers as a registered workload (`jouleprof profile video --preset hiera-b`).

Preset: a model name of the video registry, or "<model>:tiny" for its few-layer CPU config.
Overrides (`--set KEY=VALUE`): any `TrainerConfig` field — method, precision, checkpointing
(`--activation-checkpointing`), lr, num_classes, frames, size, weights, optimizer_impl, seed.
Data: "fake" — clips of random normal values (already normalized) and random labels, a few
batches made once in pinned host memory; the data phase copies one to the GPU.

Phases of a step: data, forward, backward, optimizer (`step.VideoTrainer`).
"""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any

from jouleprof.timeline.markers import PhaseMarker
from jouleprof.workloads.registry import Session

HOST_BATCHES = 4
"""Distinct host batches the fake data cycles through."""

_ALIASES = {"activation_checkpointing": "checkpointing"}


def _trainer_config(preset: str, batch_size: int | None, overrides: dict):
    from jouleprof.workloads.video.models import model_names
    from jouleprof.workloads.video.step import TrainerConfig

    name, _, variant = preset.partition(":")
    if name not in model_names() or variant not in ("", "tiny"):
        raise ValueError(
            f"unknown video preset {preset!r}: choose a model ({', '.join(model_names())}), "
            "optionally with ':tiny'"
        )
    valid = {f.name for f in fields(TrainerConfig)} - {"model", "tiny"}
    kw: dict[str, Any] = {}
    for key, value in overrides.items():
        key = _ALIASES.get(key, key)
        if key in ("compile", "grad_accum_steps"):
            if value is None or value is False or (key == "grad_accum_steps" and value == 1):
                continue  # the default: nothing asked
            raise ValueError(f"{key} is not supported by the video workload")
        if key not in valid:
            raise ValueError(
                f"unknown video workload field {key!r}: choose from {', '.join(sorted(valid))}"
            )
        kw[key] = value
    if batch_size is not None:
        kw["batch_size"] = batch_size
    return TrainerConfig(model=name, tiny=variant == "tiny", **kw)


class VideoWorkload:
    """VideoMAE-B, TimeSformer-B, Video Swin-B, Hiera-B × methods × precisions."""

    name = "video"

    def config(self, preset, batch_size, num_workers, overrides):
        return _trainer_config(preset, batch_size, dict(overrides))

    def describe(self, config) -> dict[str, Any]:
        d = config.to_json()
        d["clip"] = list(config.clip)
        return d

    def device(self):
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def gpus(self) -> tuple[int, ...] | None:
        return (0,) if self.device().type == "cuda" else None

    def session(self, config, marker: PhaseMarker, data: str) -> Session:
        if data not in ("fake", "random"):
            raise ValueError(
                f"the video workload trains on data 'fake' (random clips), got {data!r}; "
                "real datasets train through `jouleprof run video --dataset`"
            )
        return _VideoSession(config, marker, self.device())

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc)


class _VideoSession:
    def __init__(self, config, marker: PhaseMarker, device) -> None:
        import torch

        from jouleprof.workloads.video.step import VideoTrainer

        self._torch = torch
        self.config = config
        self.device = device
        t = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.init()
            torch.cuda.reset_peak_memory_stats(device)
        t_cuda = time.perf_counter()
        self.trainer = VideoTrainer(config, device, marker)
        t_model = time.perf_counter()
        frames, size = config.clip
        g = torch.Generator().manual_seed(config.seed)
        pin = device.type == "cuda"
        self._host = [
            (
                torch.randn(config.batch_size, frames, 3, size, size, generator=g),
                torch.randint(0, config.num_classes, (config.batch_size,), generator=g),
            )
            for _ in range(HOST_BATCHES)
        ]
        if pin:
            self._host = [(x.pin_memory(), y.pin_memory()) for x, y in self._host]
        self.setup_timing_s = {
            "cuda_init": round(t_cuda - t, 3),
            "model_build": round(t_model - t_cuda, 3),
            "host_batches": round(time.perf_counter() - t_model, 3),
        }
        self.samples_per_step = config.batch_size
        self.data_wait_s = 0.0
        self._i = 0
        self._fixed = None

    def _batch(self, fixed: bool):
        t0 = time.perf_counter()
        x, y = self._host[0 if fixed else self._i % HOST_BATCHES]
        self._i += 0 if fixed else 1
        out = (x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))
        self.data_wait_s += time.perf_counter() - t0
        return out

    def sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def step(self, sync: bool, fixed: bool = False) -> float:
        t0 = time.perf_counter()
        self.trainer.step_on(lambda: self._batch(fixed))
        if sync:
            self.sync()
        return time.perf_counter() - t0

    def replays(self):
        if self._fixed is None:
            self._fixed = self._batch(True)
        return self.trainer.replays(*self._fixed)

    def facts(self) -> dict[str, Any]:
        facts = self.trainer.facts()
        facts["flops_per_sample"] = self._count_flops()
        return facts

    def _count_flops(self) -> dict[str, Any]:
        """FLOPs of one clip's forward and forward+backward (torch FlopCounterMode: matmuls,
        convolutions, attention), on one clip of the fixed batch; nothing is stepped."""
        try:
            from torch.utils.flop_counter import FlopCounterMode

            x, y = self._batch(True)
            x, y = x[:1], y[:1]
            tr = self.trainer
            with FlopCounterMode(display=False) as fc, self._torch.no_grad():
                tr._forward_loss(x, y)
            fwd = fc.get_total_flops()
            with FlopCounterMode(display=False) as fc:
                tr._forward_loss(x, y).backward()
            tr.optimizer.zero_grad(set_to_none=True)
            fb = fc.get_total_flops()
        except Exception as e:  # a count we cannot make is said, not guessed
            return {"value": None, "reason": f"FLOP counting failed: {type(e).__name__}: {e}"}
        if not fb:
            return {"value": None, "reason": "FlopCounterMode counted no FLOPs (custom kernels)"}
        return {
            "forward_flops": float(fwd),
            "forward_backward_flops": float(fb),
            "method": "counted: torch FlopCounterMode on one clip (4-bit / 8-bit kernels of "
            "bitsandbytes are not counted)",
        }

    def peak_memory_bytes(self) -> int | None:
        if self.device.type != "cuda":
            return None
        return int(self._torch.cuda.max_memory_allocated(self.device))

    def close(self) -> None:
        self._host = []
