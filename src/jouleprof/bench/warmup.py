"""When a training run has warmed up: the rule the studies use to exclude warm-up steps.

Early steps are slow while kernels are chosen, the allocator grows and caches fill (and, with
torch.compile, while graphs compile). The rule: at least `min_steps` steps, and then until the
last `window` step times all lie within `tolerance` of their median and that median is within
`tolerance` of the median of the `window` steps before them. Pure: it only sees step times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WarmupRule:
    """Step times must settle before measurement starts."""

    min_steps: int = 2
    """Never fewer warm-up steps than this (at least one: the first step always pays setup)."""
    window: int = 3
    """How many recent steps must agree."""
    tolerance: float = 0.05
    """Relative spread allowed among them, and between them and the window before."""
    max_steps: int = 50
    """Give up waiting after this many steps (the run is then marked as never settled)."""

    def __post_init__(self) -> None:
        if self.min_steps < 1:
            raise ValueError(
                f"min_steps must be ≥ 1 (the first step pays setup), got {self.min_steps}"
            )
        if self.window < 2:
            raise ValueError(f"window must be ≥ 2, got {self.window}")
        if not 0 < self.tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if self.max_steps < self.min_steps:
            raise ValueError("max_steps must be ≥ min_steps")

    def describe(self) -> str:
        return (
            f"warm-up excluded: at least {self.min_steps} steps, then until {self.window} "
            f"consecutive step times agree within {self.tolerance:.0%} of their median and of "
            f"the {self.window} before them (at most {self.max_steps} steps)"
        )

    def settled(self, step_times_s: Sequence[float]) -> bool:
        """Whether warm-up is over after these steps."""
        n = len(step_times_s)
        if n < max(self.min_steps, 2 * self.window):
            return n >= self.max_steps
        recent = np.asarray(step_times_s[-self.window :], dtype=float)
        before = np.asarray(step_times_s[-2 * self.window : -self.window], dtype=float)
        med = float(np.median(recent))
        if med <= 0:
            return False
        agree = bool(np.all(np.abs(recent - med) <= self.tolerance * med))
        steady = abs(med - float(np.median(before))) <= self.tolerance * med
        return (agree and steady) or n >= self.max_steps
