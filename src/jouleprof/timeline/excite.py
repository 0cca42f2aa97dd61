"""Excitation: short random gaps between a step's phases, on purpose, during a calibration window.

A training loop repeats the same step: every phase starts at the same offset of every step, so
the sensor readings see the same mixture of phases again and again, and the regression's rows
are nearly collinear. Two phases that always follow each other cannot then be told apart,
however many steps are measured. Excitation varies the step on purpose: in a fraction of the
steps of a calibration window (the first `window_s` seconds), a short gap of random length is
put before some of the step's top-level phases. The gaps shift the phases against each other
and against the sensors' windows, so that the rows differ and each phase's power can be
separated from its neighbours'.

Each gap is recorded as a phase of its own, named ``excite_gap`` (`GAP_PHASE`), so the spans
say which steps were excited and where; attribution fits the gap like any other phase (its
power is what the device draws while it waits). Two kinds of gap (`ExciteConfig.gap`):

* ``sync``: wait for the device, then sleep on the host: the device idles for the gap. The
  host's launch queue drains, so the next phase starts without the queue ahead of it.
* ``spin``: a one-thread spin kernel on the current stream (`torch.cuda._sleep`): the host's
  queue is kept and the device draws the low power of one busy thread.

On a recorder without CUDA (host timestamps) both kinds sleep on the run's clock.

`ExciteConfig.edges()` is a preset of long gaps (40-150 ms, a few % of the steps), meant to let
the power buffer's samples follow whole load→idle→load edges; experimental (its docstring).

The cost is the gaps' time (and the device's power during them) in the excited steps, plus
what draining the queue costs the next phase (``sync``): `jouleprof.attribution.excitation`
measures it from the run (excited against plain steps).
"""

from __future__ import annotations

import numbers
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

GAP_PHASE = "excite_gap"
GAPS: tuple[str, ...] = ("sync", "spin")
EDGE_MIN_GAP_S = 0.040
"""`ExciteConfig.edges`: the shortest long gap (two thirds of the buffer's 60 ms window)."""
EDGE_MAX_GAP_S = 0.150
"""`ExciteConfig.edges`: the longest long gap."""


@dataclass(frozen=True)
class ExciteConfig:
    """Where and how long the excitation gaps are."""

    fraction: float = 0.25
    """Share of the calibration window's steps that are excited (drawn at random)."""
    window_s: float = 30.0
    """The calibration window: steps that begin within this many seconds of the first step
    can be excited; later steps run as they are."""
    boundary_prob: float = 0.5
    """In an excited step, the chance that a given top-level phase (after the step's first)
    gets a gap before it (a step counts as excited once it got one)."""
    min_gap_s: float = 0.5e-3
    """Shortest gap."""
    max_gap_s: float = 5e-3
    """Longest gap (lengths are drawn uniformly in between)."""
    gap: str = "sync"
    """``sync`` (wait for the device, then sleep: it idles) or ``spin`` (a one-thread spin
    kernel: the launch queue is kept)."""
    seed: int = 0
    """Seeds which steps and boundaries are excited and the gaps' lengths."""

    def __post_init__(self) -> None:
        for f in ("fraction", "window_s", "boundary_prob", "min_gap_s", "max_gap_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"ExciteConfig.{f} is a number, got {type(v).__name__} {v!r}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0 seconds, got {self.window_s}")
        if not 0 < self.boundary_prob <= 1:
            raise ValueError(f"boundary_prob must be in (0, 1], got {self.boundary_prob}")
        if not 0 < self.min_gap_s <= self.max_gap_s:
            raise ValueError(
                f"need 0 < min_gap_s <= max_gap_s, got {self.min_gap_s}, {self.max_gap_s}"
            )
        if self.max_gap_s > 1.0:
            raise ValueError(f"max_gap_s must be at most 1 s, got {self.max_gap_s}")
        if self.gap not in GAPS:
            raise ValueError(f"gap must be one of {', '.join(GAPS)}, got {self.gap!r}")

    @classmethod
    def edges(
        cls, window_s: float = 30.0, fraction: float = 0.05, **overrides: Any
    ) -> ExciteConfig:
        """Long idle gaps ("edges"), experimental: ``sync`` gaps of 40-150 ms in `fraction` of
        the steps of the first `window_s` seconds (other fields as `overrides`).

        A long gap idles the device for about the power buffer's window (60 ms) or longer, so
        the buffer's samples follow whole load→idle→load edges, whose shape is the buffer's
        kernel rather than the phases'. On a simulated GPU whose phases are not flat in power
        (benchmarks/edge_excite_sim.py) they brought the window chosen by the run's residuals
        toward the true one and halved the largest phases' errors, but with H200-like residuals
        (~24 W) they did not identify it (Δχ² of the neighbouring lengths ≤ 3.3 at 5-10 % of
        the steps), so the intervals did not narrow; they cost +9-22 % of the run's time on a
        51 ms step. Not yet checked on a GPU (docs/excitation.md, "Long gaps")."""
        kw: dict[str, Any] = dict(min_gap_s=EDGE_MIN_GAP_S, max_gap_s=EDGE_MAX_GAP_S, gap="sync")
        kw.update(overrides)
        return cls(fraction=fraction, window_s=window_s, **kw)


class Exciter:
    """Decides, per step and boundary, whether to put a gap, and puts it (the recorder's hook).

    `PhaseRecorder(..., excite=ExciteConfig(...))` makes one and calls `before_phase` when a
    top-level phase begins inside a step after its first phase.
    """

    def __init__(self, config: ExciteConfig, clock: Any, torch: Any = None, device: Any = None):
        self.config = config
        self._clock = clock
        self._torch = torch
        self._device = device
        self._rng = np.random.default_rng([config.seed, 20])
        self._t_first: float | None = None
        self._step: int | None = None
        self._excited_now = False
        self._gapped_now = False
        self._cycles_per_s: float | None = None
        self.excited_steps: list[int] = []
        self.n_gaps = 0
        self.gap_s_total = 0.0
        self.n_window_steps = 0

    def _decide(self, step: int) -> None:
        now = self._clock.now_s()
        if self._t_first is None:
            self._t_first = now
        self._step = step
        self._gapped_now = False
        inside = now - self._t_first < self.config.window_s
        if inside:
            self.n_window_steps += 1
        self._excited_now = bool(inside and self._rng.random() < self.config.fraction)

    def before_phase(self, rec: Any, step: int, name: str) -> None:
        """Maybe put a gap (recorded as `GAP_PHASE`) before the phase `name` that `rec` is
        opening in `step`."""
        if name == GAP_PHASE:
            return
        if step != self._step:
            self._decide(step)
        if not self._excited_now:
            return
        cfg = self.config
        if not self._rng.random() < cfg.boundary_prob:
            return
        gap_s = float(self._rng.uniform(cfg.min_gap_s, cfg.max_gap_s))
        if not self._gapped_now:
            self._gapped_now = True
            self.excited_steps.append(step)
        if self._torch is not None and cfg.gap == "sync":
            self._torch.cuda.synchronize(self._device)
        rec.begin_phase(GAP_PHASE)
        self._wait(gap_s)
        rec.end_phase(GAP_PHASE)
        self.n_gaps += 1
        self.gap_s_total += gap_s

    def _wait(self, gap_s: float) -> None:
        if self._torch is not None and self.config.gap == "spin":
            self._torch.cuda._sleep(max(1, int(gap_s * self._spin_rate())))
            return
        sleep = getattr(self._clock, "sleep_s", None)
        if sleep is not None:
            sleep(gap_s)
        else:
            time.sleep(gap_s)

    def _spin_rate(self) -> float:
        """Spin-kernel cycles per second of this device, timed once with CUDA events."""
        if self._cycles_per_s is None:
            torch = self._torch
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            n = 2_000_000
            torch.cuda._sleep(n)  # first launch
            start.record()
            torch.cuda._sleep(n)
            end.record()
            end.synchronize()
            self._cycles_per_s = n / max(start.elapsed_time(end) / 1e3, 1e-6)
        return self._cycles_per_s

    def to_json(self) -> dict[str, Any]:
        """What was excited (for run.json `extra["excite"]`)."""
        return {
            "config": asdict(self.config),
            "gap_phase": GAP_PHASE,
            "n_window_steps": self.n_window_steps,
            "n_excited_steps": len(self.excited_steps),
            "excited_steps": list(self.excited_steps),
            "n_gaps": self.n_gaps,
            "gap_s_total": self.gap_s_total,
            "spin_cycles_per_s": self._cycles_per_s,
        }
