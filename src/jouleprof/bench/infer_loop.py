"""The steady inference loop: the one loop `jouleprof infer --protocol steady` runs and the
inference predictor's dataset collection (benchmarks/predict_collect.py) measures, so that what
the predictor learns is what a user's `jouleprof infer` measures.

    x = random_input(batch, input_shape, device)
    with inference_context(precision, device):
        w = steady_window(model, x, window_s=6.0, now=clock.now_s, on_edge=densify)
    w.passes, w.t0_s, w.t1_s, w.pass_times_s

The structure, in order (the protocol the predictor predicts):

1. the caller's model in eval mode; `torch.inference_mode` and autocast at the precision (none
   for fp32) entered ONCE around everything below (`inference_context`; `steady_window` refuses
   to run outside it). Under inference mode autocast does not cache the half-precision copies of
   the weights (PyTorch's rule), so every pass casts them again;
2. `gc.collect()`, a synchronize and the peak-memory counter reset (CUDA);
3. `warmup` passes (3), a synchronize, and passes with a synchronize after each for `settle_s`
   more seconds (0 by default: `jouleprof infer` has none);
4. the window's start edge: `on_edge()` (e.g. a counter read right now), then t0 = now();
5. passes, each followed by a synchronize and timed on the host clock, until the window has lasted
   `window_s` seconds and at least `min_passes` passes ran;
6. t1 = now(), the end edge `on_edge()`.

`device_sync` is the synchronize used at every point above (a no-op on a CPU).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

WARMUP_PASSES = 3
EDGE_DENSE_S = 1.0
"""Seconds of dense counter reads requested at each window edge (a measurement's sampler)."""


@dataclass(frozen=True)
class SteadyWindow:
    """One measured window of the steady loop."""

    passes: int
    """Passes inside the window (each followed by a synchronize)."""
    t0_s: float
    """Window start on the `now` clock (after the start edge)."""
    t1_s: float
    """Window end on the `now` clock (before the end edge)."""
    pass_times_s: tuple[float, ...]
    """Host-clock seconds of each pass including its synchronize."""

    @property
    def window_s(self) -> float:
        return self.t1_s - self.t0_s


def device_sync(device: Any) -> Callable[[], None]:
    """The synchronize of `device` (torch.device or str): a no-op unless it is CUDA."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return lambda: None
    return lambda: torch.cuda.synchronize(dev)


def inference_context(precision: str, device: Any) -> ExitStack:
    """`torch.inference_mode()` and autocast at `precision` (fp32: none), as one context."""
    import torch

    from jouleprof.workloads.video.precision import autocast

    stack = ExitStack()
    stack.enter_context(torch.inference_mode())
    stack.enter_context(autocast(precision, torch.device(device)))
    return stack


def random_input(batch: int, shape: tuple[int, ...], device: Any, seed: int = 0):
    """A random normal input batch (never zeros: some kernels are faster on zeros)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(int(batch), *shape, device=device, generator=g)


def measurement_edges(m) -> tuple[Callable[[], float], Callable[[], None]]:
    """(now, on_edge) for a window inside the open measurement `m` (None: host clock, no edge).

    on_edge asks the sampler for dense counter reads and reads every sensor now, so each edge has
    a counter reading just before it."""
    if m is None:
        return time.perf_counter, lambda: None

    def edge() -> None:
        if m.sampler.devices:
            m.sampler.densify(EDGE_DENSE_S, read_now=True)

    return m.clock.now_s, edge


def reset_device(device: Any) -> None:
    """Collect garbage; on CUDA also synchronize and reset the peak-memory counter."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        gc.collect()
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)


def _check_context(precision: str, device_type: str) -> None:
    import torch

    if not torch.is_inference_mode_enabled():
        raise RuntimeError("steady_window runs inside inference_context(precision, device)")
    want = precision != "fp32"
    if torch.is_autocast_enabled(device_type) != want:
        raise RuntimeError(
            f"steady_window at {precision} needs autocast {'on' if want else 'off'} for "
            f"{device_type}: run it inside inference_context({precision!r}, device)"
        )


def steady_window(
    forward: Callable[[Any], Any],
    x: Any,
    *,
    precision: str,
    window_s: float,
    warmup: int = WARMUP_PASSES,
    settle_s: float = 0.0,
    min_passes: int = 2,
    now: Callable[[], float] | None = None,
    on_edge: Callable[[], None] | None = None,
) -> SteadyWindow:
    """Run steps 2-6 of the module docstring on `forward(x)`; must be called inside
    `inference_context(precision, x.device)`."""
    if window_s <= 0 or warmup < 0 or settle_s < 0 or min_passes < 1:
        raise ValueError("window_s must be > 0, warmup and settle_s >= 0, min_passes >= 1")
    device = x.device
    _check_context(precision, device.type)
    sync = device_sync(device)
    now = now or time.perf_counter
    edge = on_edge or (lambda: None)
    reset_device(device)
    for _ in range(warmup):
        forward(x)
    sync()
    h_end = time.perf_counter() + settle_s
    while time.perf_counter() < h_end:
        forward(x)
        sync()
    edge()
    t0 = now()
    h0 = time.perf_counter()
    times: list[float] = []
    while time.perf_counter() - h0 < window_s or len(times) < min_passes:
        t = time.perf_counter()
        forward(x)
        sync()
        times.append(time.perf_counter() - t)
    t1 = now()
    edge()
    return SteadyWindow(len(times), t0, t1, tuple(times))
