"""The isolation reference: each replayable phase run alone in a loop, as a window of time.

For a step whose phases can be replayed on their own ("forward", "forward+backward",
"optimizer", "ema", and "forward+backward+optimizer", which prices the optimizer where it runs,
after a backward), each replay runs alone in a loop for at least `duration_s` after a
short warm-up, while the sampler records in the background. The device is synchronized only
at the loop's edges, so the loop runs as it would in training. The result of each replay is a
*window*: [t0_s, t1_s] on the run's clock (the clock of samples.csv) and the number of calls
made in it. The energy of each window is computed afterwards from samples.csv by the
attribution's isolation method, which differences the replays (backward = forward+backward −
forward); this module measures no energy itself.

The windows are written, one row per replay as each finishes, to ``isolation_windows.csv`` in
the run directory:

    replay, n_calls, t0_s, t1_s, time_per_call_s

(t0_s/t1_s: seconds on the run's clock; time_per_call_s = (t1_s − t0_s) / n_calls.)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouleprof.store.isolation import (  # noqa: F401  (re-exported)
    ISOLATION_COLUMNS,
    ISOLATION_CSV,
    IsolationWindow,
    append_window,
    read_isolation_windows,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IsolationConfig:
    """How long to run each replay."""

    duration_s: float = 6.0
    """Least time each replay runs in its measured loop (≥ 5 s: many sensor refreshes)."""
    warmup_s: float = 1.0
    """Time each replay runs before its window opens (allocator, autotuning, clocks)."""
    min_calls: int = 3
    """Least calls in a window, however long a call takes."""
    gap_s: float = 0.5
    """Idle time between windows, so that a window's edges are not smeared by the last."""
    repeats: int = 1
    """Rounds over all the replays (each replay's loops interleaved with the others'): the
    reference then averages over the device's drift between loops. On the H200 the optimizer
    replayed alone drew 2.95, 3.15 and 3.14 J a call in three runs, 6 s a loop
    (benchmarks/results/attr_vith_b8, run6–run8)."""

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")
        if self.warmup_s < 0:
            raise ValueError(f"warmup_s must be ≥ 0, got {self.warmup_s}")
        if self.min_calls < 1:
            raise ValueError(f"min_calls must be ≥ 1, got {self.min_calls}")
        if self.gap_s < 0:
            raise ValueError(f"gap_s must be ≥ 0, got {self.gap_s}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be ≥ 1, got {self.repeats}")


def default_synchronize() -> Callable[[], None]:
    """torch.cuda.synchronize where CUDA is in use, else nothing (CPU replays are synchronous)."""
    try:
        import torch
    except ImportError:
        return lambda: None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.synchronize
    return lambda: None


def run_isolation(
    replays: Mapping[str, Callable[[], Any]],
    clock: Any,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    config: IsolationConfig | None = None,
    synchronize: Callable[[], None] | None = None,
) -> list[IsolationWindow]:
    """Run each replay alone in a loop and return its window on `clock`.

    Args:
        replays: name → a callable that runs the phase once (e.g. {"forward": fwd,
            "forward+backward": fwd_bwd, "optimizer": opt_step, "ema": ema_update}).
        clock: the run's clock (`Measurement.clock`), the clock of samples.csv.
        out_dir: a run directory to append isolation_windows.csv to, window by window.
        config: durations; default 6 s per replay after 1 s of warm-up.
        synchronize: waits for the device; default `torch.cuda.synchronize` when CUDA is in
            use, else nothing.

    Returns:
        One window per replay and round (`config.repeats`), in the order run.
    """
    if not replays:
        raise ValueError("run_isolation needs at least one replay")
    cfg = config or IsolationConfig()
    sync = synchronize or default_synchronize()
    path = Path(out_dir) / ISOLATION_CSV if out_dir is not None else None
    windows: list[IsolationWindow] = []
    rounds = [item for _ in range(cfg.repeats) for item in replays.items()]
    for i, (name, fn) in enumerate(rounds):
        if i and cfg.gap_s > 0:
            clock.sleep_s(cfg.gap_s)
        log.info(
            "isolation: %s (%.1f s warm-up, %.1f s measured)", name, cfg.warmup_s, cfg.duration_s
        )
        t_w = time.perf_counter()
        fn()
        sync()  # the first call may be much longer (compilation, allocation)
        while time.perf_counter() - t_w < cfg.warmup_s:
            fn()
        sync()
        n = 0
        t0 = clock.now_s()
        # The host checks the time without waiting for the device: it may run ahead by the
        # launch queue's depth, which the final synchronize drains inside the window.
        while n < cfg.min_calls or clock.now_s() - t0 < cfg.duration_s:
            fn()
            n += 1
        sync()
        t1 = clock.now_s()
        w = IsolationWindow(name, n, t0, t1)
        windows.append(w)
        if path is not None:
            append_window(path, w)
        log.info("isolation: %s: %d calls, %.3f ms/call", name, n, w.time_per_call_s * 1e3)
    return windows


def run_isolation_in(
    measurement: Any,
    replays: Mapping[str, Callable[[], Any]],
    config: IsolationConfig | None = None,
    **kw: Any,
) -> list[IsolationWindow]:
    """`run_isolation` inside `with measure(...) as m:`: its clock, its run directory, and
    the windows also in run.json (`extra["isolation_windows"]`)."""
    windows = run_isolation(
        replays, measurement.clock, out_dir=measurement.run_dir.path, config=config, **kw
    )
    measurement.record.extra["isolation_windows"] = [
        dict(zip(ISOLATION_COLUMNS, w.row(), strict=True)) for w in windows
    ]
    return windows
