"""`run`: train for a number of steps or a duration, reporting each step's host time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from jouleprof.timeline.markers import PhaseMarker
from jouleprof.workloads.vjepa2.collate import ClipBatchLoader, make_loader
from jouleprof.workloads.vjepa2.config import VJepa2Config
from jouleprof.workloads.vjepa2.step import VJepa2Trainer

OnStep = Callable[[int, float, int], None]


@dataclass(frozen=True)
class RunSummary:
    """What a run did; warm-up steps included (the caller excludes what it wants via on_step)."""

    steps: int
    samples: int
    elapsed_s: float
    """Host time from the first step's start to the end, after a final device synchronize."""
    final_loss: float | None


def run(
    config: VJepa2Config,
    marker: PhaseMarker,
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    data: object = "fake",
    on_step: OnStep | None = None,
    device: torch.device | str | None = None,
    synchronize_steps: bool = False,
) -> RunSummary:
    """Trains for `steps` optimizer steps or until `duration_s` has passed (exactly one of them).

    Args:
        config: What to train.
        marker: Receives the step and phase boundaries.
        steps: Number of optimizer steps.
        duration_s: Host seconds; the step running when it passes is finished.
        data: A loader (`make_loader`'s, or a DataLoader) or iterator of `VJepa2Batch`, or a
            source for `make_loader` ('fake', a folder, a .csv list, paths, a Dataset).
        on_step: Called as on_step(step_index, step_time_s, samples) after each step.
        device: Default: CUDA if present, else CPU.
        synchronize_steps: Wait for the device after each step so step_time_s is the device's
            time; without it, host times of a CUDA run drift from the device's step by step and
            only agree on average (the queue absorbs the difference).

    Returns:
        Steps, samples, elapsed time and the last step's loss.
    """
    if (steps is None) == (duration_s is None):
        raise ValueError("give exactly one of steps and duration_s")
    if steps is not None and steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    owned = None  # a loader made here is shut down here
    if isinstance(data, ClipBatchLoader | DataLoader):
        batches: Iterator = iter(data)
    elif isinstance(data, Iterator):
        batches = data
    else:
        # Before the trainer: the workers start (fork) before CUDA is initialized here and
        # decode the first batch while the networks are built.
        batches = owned = iter(make_loader(config, data, device=device))
    try:
        trainer = VJepa2Trainer(config, device, marker)

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        done, samples, result = 0, 0, None
        start = time.perf_counter()
        while steps is None or done < steps:
            if duration_s is not None and time.perf_counter() - start >= duration_s:
                break
            t0 = time.perf_counter()
            try:
                result = trainer.train_step(batches)
            except StopIteration:  # a finite loader ran out
                break
            if synchronize_steps:
                sync()
            step_time_s = time.perf_counter() - t0
            samples += result.samples
            if on_step is not None:
                on_step(done, step_time_s, result.samples)
            done += 1
        sync()
        elapsed_s = time.perf_counter() - start
    finally:
        if owned is not None:
            owned.close()
    final_loss = None if result is None else float(result.loss)
    return RunSummary(steps=done, samples=samples, elapsed_s=elapsed_s, final_loss=final_loss)
