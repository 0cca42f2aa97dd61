"""The V-JEPA2 trainer as a registered workload (`jouleprof profile vjepa2`).

Drives `jouleprof.workloads.vjepa2.step.VJepa2Trainer` through the registry's `Workload` /
`Session` protocols (`jouleprof.workloads.registry`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from jouleprof.timeline.markers import PhaseMarker
from jouleprof.workloads.registry import Session


class VJepa2Workload:
    """The V-JEPA2 trainer of `jouleprof.workloads.vjepa2`."""

    name = "vjepa2"

    def config(self, preset, batch_size, num_workers, overrides):
        from jouleprof.workloads.vjepa2 import get_preset

        kw = dict(overrides)
        if batch_size is not None:
            kw["batch_size"] = batch_size
        if num_workers is not None:
            kw["num_workers"] = num_workers
        cfg = get_preset(preset, **kw)
        if num_workers is None and "num_workers" not in overrides:
            from jouleprof.cores import pool_cores

            # the preset's loader workers, but no more than the cores this process may use
            # (torch warns of, and the workers contend over, more: a 2-core machine)
            cfg = replace(cfg, num_workers=min(cfg.num_workers, pool_cores()))
        return cfg

    def describe(self, config) -> dict[str, Any]:
        d = asdict(config)
        d["preset_tokens"] = config.num_tokens
        return d

    def device(self):
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def gpus(self) -> tuple[int, ...] | None:
        # The trainer uses "cuda", the current device: 0 unless the process changed it.
        return (0,) if self.device().type == "cuda" else None

    def session(self, config, marker: PhaseMarker, data: str) -> Session:
        return _VJepa2Session(config, marker, data, self.device())

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc)


class _VJepa2Session:
    def __init__(self, config, marker: PhaseMarker, data: str, device) -> None:
        import torch

        from jouleprof.workloads.vjepa2.collate import make_loader
        from jouleprof.workloads.vjepa2.step import VJepa2Trainer

        self._torch = torch
        self.config = config
        self.device = device
        t = time.perf_counter()
        # The loader first: its workers are forked before anything here initializes CUDA
        # (forking a process that holds a CUDA context copies its large mappings), and they
        # decode the first batches while the model is built. (With PyTorch's own batching one
        # worker decoded all 64 clips of a batch-64 first batch, 15–22 s on the H200's host;
        # the loader now spreads a batch's clips over its workers.)
        self._loader = iter(make_loader(config, data, device=device))
        t_loader = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.init()
            torch.cuda.reset_peak_memory_stats(device)
        t_cuda = time.perf_counter()
        self.trainer = VJepa2Trainer(config, device, marker)
        self.setup_timing_s = {  # where the session's set-up went (run.json extra)
            "loader_start": round(t_loader - t, 3),
            "cuda_init": round(t_cuda - t_loader, 3),
            "model_build": round(time.perf_counter() - t_cuda, 3),
        }
        self.batches = self._keep_first(self._loader)
        self.fixed_batch = None  # the first batch drawn (on the host), replayed by fixed steps
        self.samples_per_step = config.samples_per_step
        # Every batch's masks keep a different number of tokens: compiled graphs must see
        # several during the warm-up, not one replayed batch.
        self.warmup_on_real_batches = bool(config.compile)

    def compiled_graphs(self) -> int | None:
        """Graphs torch.compile has compiled in this process so far; None when not compiling."""
        if not self.config.compile:
            return None
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def _keep_first(self, it):
        for batch in it:
            if self.fixed_batch is None:
                self.fixed_batch = batch
            yield batch

    @property
    def data_wait_s(self) -> float:
        """Host seconds the trainer has spent getting batches so far."""
        return self.trainer.data_wait_s

    def sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def step(self, sync: bool, fixed: bool = False) -> float:
        t0 = time.perf_counter()
        if fixed and self.fixed_batch is None:
            next(self.batches)  # draws the first batch, which _keep_first keeps
        self.trainer.train_step(self.fixed_batch if fixed else self.batches)
        if sync:
            self.sync()
        return time.perf_counter() - t0

    def replays(self) -> dict[str, Callable[[], Any]]:
        t = self.trainer
        return {
            "forward": t.run_forward,
            "forward+backward": t.run_forward_backward,
            "optimizer": t.run_optimizer_step,
            "ema": t.run_ema,
            # Last, so the loops above run as before; the attribution keeps it out of the main
            # system (it over-determines the optimizer) and reports the optimizer in place.
            "forward+backward+optimizer": t.run_forward_backward_optimizer,
        }

    def facts(self) -> dict[str, Any]:
        from jouleprof.workloads.vjepa2.flops import flops_per_sample

        facts: dict[str, Any] = {"parameters": self.trainer.parameter_counts()}
        try:
            facts["flops_per_sample"] = flops_per_sample(self.config)
        except Exception as e:  # a count we cannot make is said, not guessed
            facts["flops_per_sample"] = {"value": None, "reason": f"{type(e).__name__}: {e}"}
        return facts

    def peak_memory_bytes(self) -> int | None:
        if self.device.type != "cuda":
            return None
        return int(self._torch.cuda.max_memory_allocated(self.device))

    def close(self) -> None:
        it, self._loader = self._loader, None
        if self.batches is not None:
            self.batches.close()  # the generator's frame holds the loader iterator too
            self.batches = None
        shutdown = getattr(it, "_shutdown_workers", None)  # multi-process iterators only
        if shutdown is not None:
            shutdown()
