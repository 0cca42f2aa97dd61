"""Where a run repeated phases on purpose, the regression fits the energy counter's rows
without the power buffer's (pure functions over the recorded spans and run.json).

Why. A run whose replayable phases ran twice in some steps (`timeline.repeat`) holds steps that
differ by one more of a phase's energy. The energy counter integrates exactly and needs no
averaging window, so its rows see that difference and identify the phase. The power buffer's
rows instead carry a window whose length no run here could identify from its own residuals
(benchmarks/results/ref_loops), and on an H200-like simulated GPU they outweighed the
counter's difference: a 15 ms copy repeated in 30 % of 60 s of steps was resolved to
±2.2–3.3 % of its energy without the buffer rows and ±10.5–11.0 % with them; repeated in
10 %, ±3.4–5.6 % (benchmarks/results/ref_loops/simulated_repeat). Without repetition the
counter's rows are near-collinear and the buffer rows stay (they resolve V-JEPA2's 6 ms
optimizer step).

The rule applies where `RegressionConfig.use_buffer` is None (its default) and the run's
analysed steps hold at least MIN_REPEATED_STEPS steps with a phase that run.json
``extra["repeat"]`` names as replayed running more than once; ``use_buffer=True`` keeps the
buffer rows whatever was repeated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MIN_REPEATED_STEPS = 20
"""Fewest analysed steps with a repeated phase for the rule to leave the buffer rows out
(as `RegressionConfig.min_rows`: fewer differences than this carry too little to stand alone;
the simulated runs above had 130–400)."""


def replayed_phases(extra: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The phase names run.json ``extra["repeat"]`` says were run through `replay()`."""
    rep = (extra or {}).get("repeat")
    if not isinstance(rep, Mapping):
        return ()
    return tuple(str(p) for p in rep.get("phases") or ())


def repeated_steps(spans, phases: Iterable[str], steps: Iterable[int]) -> list[int]:
    """Of `steps`, those in which one of `phases` (a leaf name, at any depth) has more than
    one span."""
    names = set(phases)
    if not names or spans is None or len(spans) == 0:
        return []
    leaf = spans["phase"].astype(str).str.rsplit("/", n=1).str[-1]
    mine = spans[leaf.isin(names) & spans["step"].isin(list(steps))]
    if mine.empty:
        return []
    counts = mine.groupby(["step", "phase"]).size()
    twice = counts[counts > 1].index.get_level_values("step")
    return sorted({int(s) for s in twice})


def buffer_decision(
    use_buffer: bool | None, extra: Mapping[str, Any] | None, spans, steps: Iterable[int]
) -> tuple[bool, str | None]:
    """(whether the buffer rows may be used, the note saying why not or None).

    `use_buffer` is the configuration's (`RegressionConfig.use_buffer`), `extra` the run
    record's, `spans` spans.csv, `steps` the analysed steps."""
    if use_buffer is not None:
        return bool(use_buffer), None
    phases = replayed_phases(extra)
    if not phases:
        return True, None
    n = len(repeated_steps(spans, phases, steps))
    if n < MIN_REPEATED_STEPS:
        return True, None
    return False, (
        f"buffer rows: left out, because the run repeated {', '.join(phases)} in {n} analysed "
        "steps and the energy counter's rows identify them (pass use_buffer=True, or "
        "--buffer-rows, to keep them)"
    )
