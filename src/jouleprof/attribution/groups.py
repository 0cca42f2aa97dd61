"""Phases weighed together on request: a row of the regression's table for a group of phases
that the user names ("gemm+copy"), its energy and interval from the same fit and bootstrap.

Two phases that run back to back can share energy: on an H100, a 1 GiB copy right after an
800 W GEMM draws more than the copy looped alone, and removing the GEMM from the step saves more
than the GEMM alone costs (benchmarks/results/ref_loops/README.md, "A third reference"). Each
phase's figure is then defined only to within that shared energy, but the pair's is not: a
group's row prices what the two cost together, whichever of them the shared energy is booked
to. Where the fit trades energy between the members (one high while the other is low), their
sum's interval is narrower than either's, because the bootstrap and the sensor model's spread
are taken over the sum, not added.

`parse_groups` checks what the user wrote (pure); `group_rows` makes the rows from a fitted
model, as the regression's own joint rows are made (`regression_results._joint_results`), but
for any phases of the step, adjacent or not, resolved or not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from jouleprof.attribution.result import PhaseResult, pct_text, unresolved
from jouleprof.errors import AttributionError

SEP = "+"
"""Joins the members of a group in its name ("gemm+copy"), as in the automatic joint rows."""


def parse_groups(groups: Iterable[str] | str | None) -> tuple[tuple[str, ...], ...]:
    """The groups as member tuples, from "a+b" strings (or one string, or None: none).

    Raises:
        ValueError: a group with fewer than two distinct members or an empty member.
    """
    if groups is None:
        return ()
    if isinstance(groups, str):
        groups = [groups]
    out: list[tuple[str, ...]] = []
    for g in groups:
        members = tuple(m.strip() for m in str(g).split(SEP))
        if any(not m for m in members):
            raise ValueError(
                f"joint group {g!r} has an empty phase name: write it as phase1+phase2"
            )
        if len(set(members)) < 2:
            raise ValueError(
                f"joint group {g!r} names fewer than two phases: write it as phase1+phase2"
            )
        if len(set(members)) != len(members):
            raise ValueError(f"joint group {g!r} names a phase twice")
        if members not in out:
            out.append(members)
    return tuple(out)


def check_members(groups: Sequence[tuple[str, ...]], phases: Iterable[str]) -> None:
    """Raise an `AttributionError` naming the first member that is not one of `phases`."""
    known = list(dict.fromkeys(phases))
    for g in groups:
        for m in g:
            if m not in known:
                raise AttributionError(
                    f"joint group {SEP.join(g)}: the run has no phase {m!r}; its phases are "
                    f"{', '.join(known)}"
                )


def sum_row(
    label: str,
    time_s: float,
    n_steps: int,
    e: float,
    lo: float,
    hi: float,
    step_e: float,
    method: str,
    note: str,
    device: str,
) -> PhaseResult:
    """A resolved row for phases weighed together ("a+b"): their energy `e` over the analysed
    steps and its interval [lo, hi] (J, lo floored at 0), their summed time, their share of
    the steps' energy `step_e`. The regression's own joint rows are made with it too."""
    return PhaseResult(
        label,
        time_s,
        time_s / n_steps if n_steps else 0.0,
        e,
        max(lo, 0.0),
        hi,
        e / time_s if time_s > 0 else None,
        100.0 * e / step_e if step_e > 0 else None,
        method,
        True,
        note,
        device,
        n_steps,
    )


def group_rows(
    groups: Sequence[tuple[str, ...]],
    order: Sequence[str],
    time_s: dict[str, float],
    fitted: Callable[[str], bool],
    interval: Callable[[list[str]], tuple[float, float, float]],
    n_steps: int,
    step_e: float,
    device: str,
    method: str,
    have: Iterable[str] = (),
    confidence: float = 0.95,
) -> list[PhaseResult]:
    """One row per group (members in step `order`), skipping any whose name is in `have` (an
    automatic joint row of the same phases: the same figure).

    Args:
        time_s: each phase's time over the analysed steps.
        fitted: whether the fit gave a phase a power (a phase with too few rows has none).
        interval: members → (energy, lo, hi) in J over the analysed steps, from the fit.
        step_e: the analysed steps' energy (for the share), J.
    """
    taken = set(have)
    out: list[PhaseResult] = []
    for g in groups:
        members = [p for p in order if p in g] + [p for p in g if p not in order]
        label = SEP.join(members)
        if label in taken:
            continue
        taken.add(label)
        t = float(sum(time_s.get(p, 0.0) for p in members))
        missing = [p for p in members if not fitted(p)]
        if missing:
            out.append(
                unresolved(
                    label,
                    t,
                    n_steps,
                    method,
                    f"weighed together on request, but {', '.join(missing)} got no power from "
                    "the fit (too few sensor intervals overlap it)",
                    device,
                )
            )
            continue
        e, lo, hi = interval(members)
        if e > 0 and hi - lo <= e:
            note = f"weighed together on request: ±{pct_text(50 * (hi - lo) / e)}%"
            out.append(sum_row(label, t, n_steps, e, lo, hi, step_e, method, note, device))
            continue
        note = (
            f"weighed together on request; its {100 * confidence:.0f}% interval "
            f"[{lo:.4g}, {hi:.4g}] J over the run is wider than the estimate {e:.4g} J"
        )
        row = unresolved(label, t, n_steps, method, note, device)
        out.append(replace(row, estimate_j=e, estimate_lo_j=lo, estimate_hi_j=hi))
    return out


__all__ = ["SEP", "check_members", "group_rows", "parse_groups", "sum_row"]
