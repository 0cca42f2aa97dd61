"""Phase repetition: replayable phases run twice in some steps of a calibration window.

The second kind of excitation (`timeline.excite` is the first: gaps between phases). In a
loop whose every step is alike, each energy reading sees the same mixture of phases, and two
phases that always run together cannot be told apart. A phase that can run again with no
effect but its cost (a data copy, a forward pass under ``no_grad``, a preprocessing kernel,
not a backward that accumulates gradients nor an optimizer step) can be *replayed*: in a
fraction of the steps of a calibration window it runs twice back to back, each run its own
span of the same phase. A repeated step then holds one more of that phase's energy, and the
energy counter, which integrates exactly and needs no averaging window, sees the difference.

The loop says which phases are replayable by running them through
`PhaseRecorder.replay(name, fn, *args)`; a recorder without a `RepeatConfig` runs each once,
so the call can stay in the loop with repetition off. What was repeated is recorded in
run.json ``extra["repeat"]`` (`Repeater.to_json`); the regression reads it
(`attribution.repeat_rule`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from jouleprof.timeline.opt_in import opt_in


@dataclass(frozen=True)
class RepeatConfig:
    """Which steps run their replayable phases twice."""

    fraction: float = 0.3
    """Chance that a replayable phase of a calibration window's step runs twice, drawn for
    each phase and step, so that two replayable phases are not always doubled together. On an
    H200-like simulated GPU (benchmarks/results/ref_loops/simulated_repeat_rule) a 15 ms copy
    beside a 29 ms GEMM went from ±13 % to ±2.6-3.3 % of its energy at 0.3 and ±3.4-4.7 % at
    0.1, in 60 s of steps."""
    window_s: float = 30.0
    """The calibration window: steps that begin within this many seconds of the first step can
    repeat; later steps run as they are."""
    seed: int = 0
    """Seeds which steps repeat."""

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"repeat fraction must be in (0, 1], got {self.fraction}")
        if not self.window_s > 0:
            raise ValueError(f"repeat window_s must be > 0 seconds, got {self.window_s}")


class Repeater:
    """Decides, for each replayable phase of a window step, whether it runs twice (the
    recorder's hook behind `PhaseRecorder.replay`), and counts what was repeated."""

    def __init__(self, config: RepeatConfig, clock: Any) -> None:
        self.config = config
        self._clock = clock
        self._rng = np.random.default_rng([config.seed, 31])
        self._t_first: float | None = None
        self._step: int | None = None
        self._inside = False
        self.n_window_steps = 0
        self.repeated_steps: list[int] = []
        self.phases: dict[str, int] = {}
        """Replayable phase → how many times it ran a second time."""

    def _enter(self, step: int) -> None:
        now = self._clock.now_s()
        if self._t_first is None:
            self._t_first = now
        self._step = step
        self._inside = now - self._t_first < self.config.window_s
        self.n_window_steps += self._inside

    def twice(self, step: int, name: str) -> bool:
        """Whether the replayable phase `name`, about to run in `step`, runs twice: drawn for
        each call, so that phases replayed in the same steps are not always doubled together
        (which would identify only their sum)."""
        if step != self._step:
            self._enter(step)
        self.phases.setdefault(name, 0)
        return bool(self._inside and self._rng.random() < self.config.fraction)

    def repeated(self, step: int, name: str) -> None:
        """`name` ran a second time in `step`."""
        self.phases[name] = self.phases.get(name, 0) + 1
        if not self.repeated_steps or self.repeated_steps[-1] != step:
            self.repeated_steps.append(step)

    def to_json(self) -> dict[str, Any]:
        """What was repeated (run.json ``extra["repeat"]``)."""
        return {
            "config": asdict(self.config),
            "phases": sorted(self.phases),
            "repeats_per_phase": dict(sorted(self.phases.items())),
            "n_window_steps": int(self.n_window_steps),
            "n_repeated_steps": len(self.repeated_steps),
            "repeated_steps": list(self.repeated_steps),
        }


def repeat_config(repeat: Any) -> RepeatConfig | None:
    """`repeat=` as given to `profile` or `PhaseRecorder`: None/False (off), True (the
    defaults) or a RepeatConfig (`timeline.opt_in`).

    Raises:
        ValueError: anything else.
    """
    return opt_in(repeat, RepeatConfig, "repeat")
