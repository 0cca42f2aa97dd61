"""The interface workloads mark their phases through, and a recorder that records nothing.

Workloads (V-JEPA2, the video classifiers, user loops) take any `PhaseMarker`: the real
`PhaseRecorder` in fine mode, `NullRecorder` in baseline and end-to-end modes, so the same
training code runs in every measurement mode.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol


class PhaseMarker(Protocol):
    """Marks steps and the phases inside them."""

    def step(self) -> AbstractContextManager[object]:
        """Context of one training step; phases opened inside belong to it."""
        ...

    def phase(self, name: str) -> AbstractContextManager[object]:
        """Context of one phase ("data", "forward", "backward", "optimizer", "ema", or any name).

        Phases nest; a nested phase is recorded as "parent/child".
        """
        ...


class NullRecorder:
    """A PhaseMarker that records nothing and costs (almost) nothing: the baseline mode."""

    enabled = False

    def step(self) -> AbstractContextManager[object]:
        return nullcontext()

    def phase(self, name: str) -> AbstractContextManager[object]:
        return nullcontext()

    def replay(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn` once (`PhaseRecorder.replay` without repetition), so a loop written with
        `replay` runs unchanged when nothing is recorded."""
        return fn(*args, **kwargs)
