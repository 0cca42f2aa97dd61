"""Phase energy from replay loops measured alone: the slow reference for the other methods.

A GPU runner (elsewhere: it needs torch) replays parts of the step on their own, each in a loop
of at least 5 s on the energy counter: "forward"; "forward+backward"; "optimizer"; "ema"; and
"forward+backward+optimizer". This module is the pure part: it reads and writes the loops'
results, differences them into an energy per call of each phase (backward = (forward+backward)
− forward), and scales those to how often each phase ran in the analysed steps of the run.

The main system is built from the loops that each add a new combination of phases, taken
fewest phases first (`split_loops`); a loop whose combination the others already determine
("forward+backward+optimizer" beside "forward+backward" and "optimizer") is kept out of it, so
that it cannot pull a phase by least squares. Such a loop gives an alternative reference
instead (`in_place_energies`): the phase priced where it runs in a step, e.g. the optimizer
right after a backward = (forward+backward+optimizer) − (forward+backward), per call.

isolation.csv (in the run directory), one row per replay loop:

========== ==========================================================================
replay     the phases run per call, in order, joined by "+" ("forward+backward"); names
           are the run's phase names (spans.csv)
n_calls    how many calls the loop made
time_s     the loop's duration
energy_j   the loop's energy (counter), with its bound energy_lo_j, energy_hi_j
signal     the signal it came from (counter, power_instant, ...)
device     the device it ran on
========== ==========================================================================

The isolation runner (`bench.isolation`) records only each loop's window of time, in
isolation_windows.csv (replay, n_calls, t0_s, t1_s); `results_from_windows` measures each window's
energy from samples.csv (the counter where read, with its bound) and gives the same rows, so a
run with either file can be attributed by isolation.

Intervals are propagated by interval arithmetic through the differencing: a difference's bound
is the widest the two bounds allow, so it is conservative. An isolated phase runs warm and
without its neighbours in the step, which is exactly what makes it a reference and also its
limit (no overlap with data loading, other clocks and temperatures); its per-call power is
reported as the mean power.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import numpy as np

from jouleprof.attribution.common import IDLE, Timeline
from jouleprof.attribution.result import DeviceAttribution, PhaseResult, unresolved
from jouleprof.errors import AttributionError, RunDirError

log = logging.getLogger(__name__)

METHOD = "isolation"
ISOLATION_CSV = "isolation.csv"
WINDOWS_CSV = "isolation_windows.csv"  # written by bench.isolation
MIN_LOOP_S = 5.0


@dataclass(frozen=True)
class IsolationResult:
    """One replay loop run alone (one isolation.csv row; columns in the module docstring)."""

    replay: str
    n_calls: int
    time_s: float
    energy_j: float
    energy_lo_j: float
    energy_hi_j: float
    signal: str = "counter"
    device: str = "gpu0"

    def __post_init__(self) -> None:
        if not self.replay or any(not p for p in self.replay.split("+")):
            raise ValueError(f"replay must name phases joined by '+', got {self.replay!r}")
        if self.n_calls < 1:
            raise ValueError(f"n_calls must be ≥ 1, got {self.n_calls} for {self.replay!r}")
        if not self.time_s > 0:
            raise ValueError(f"time_s must be > 0, got {self.time_s} for {self.replay!r}")
        if not self.energy_lo_j <= self.energy_j <= self.energy_hi_j:
            raise ValueError(
                f"{self.replay!r}: need energy_lo_j ≤ energy_j ≤ energy_hi_j, got "
                f"{self.energy_lo_j}, {self.energy_j}, {self.energy_hi_j}"
            )

    @property
    def phases(self) -> tuple[str, ...]:
        return tuple(self.replay.split("+"))


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(IsolationResult))


def write_isolation_csv(
    run_dir: str | os.PathLike[str], results: Iterable[IsolationResult]
) -> Path:
    """Write isolation.csv into `run_dir` (replacing it atomically); returns its path."""
    out = Path(run_dir) / ISOLATION_CSV
    tmp = out.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in results:
            if r.time_s < MIN_LOOP_S:
                log.warning("replay %r ran %.2f s, under %g s", r.replay, r.time_s, MIN_LOOP_S)
            w.writerow(repr(v) if isinstance(v, float) else v for v in astuple(r))
    os.replace(tmp, out)
    return out


def read_isolation_csv(run_dir: str | os.PathLike[str]) -> list[IsolationResult]:
    """Read isolation.csv from `run_dir`.

    Raises:
        AttributionError: there is no isolation.csv (the run was made without isolation).
        RunDirError: the file is malformed.
    """
    p = Path(run_dir) / ISOLATION_CSV
    if not p.is_file():
        raise AttributionError(
            f"{run_dir} has no {ISOLATION_CSV}: --method isolation needs a run made with "
            "isolation enabled (replay loops of each phase measured alone)"
        )
    out = []
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS[:6] if c not in (reader.fieldnames or [])]
        if missing:
            raise RunDirError(f"{p} lacks the columns {missing}")
        for i, row in enumerate(reader, start=2):
            try:
                out.append(
                    IsolationResult(
                        replay=row["replay"],
                        n_calls=int(row["n_calls"]),
                        time_s=float(row["time_s"]),
                        energy_j=float(row["energy_j"]),
                        energy_lo_j=float(row["energy_lo_j"]),
                        energy_hi_j=float(row["energy_hi_j"]),
                        signal=row.get("signal") or "counter",
                        device=row.get("device") or "gpu0",
                    )
                )
            except (TypeError, ValueError) as e:
                raise RunDirError(f"{p} line {i} is not a valid replay row: {e}") from e
    if not out:
        raise AttributionError(f"{p} holds no replay rows")
    return out


def results_from_windows(samples, windows_path: str | os.PathLike[str], device: str):
    """IsolationResult rows for `device` from the runner's windows and the run's samples.

    Raises:
        AttributionError: a window's energy cannot be measured (the reason is given).
    """
    from jouleprof.store.isolation import read_isolation_windows
    from jouleprof.timeline.summary import best_energy
    from jouleprof.timeline.windows import signal_grids, window_energies

    try:
        windows = read_isolation_windows(windows_path)
    except ValueError as e:
        raise RunDirError(str(e)) from e
    grids = signal_grids(samples, device)  # once for every window
    out = []
    for w in windows:
        wins = window_energies(samples, device, w.t0_s, w.t1_s, grids=grids)
        best = best_energy(wins)
        if best is None or best.energy_j is None:
            why = "; ".join(f"{k}: {v.reason}" for k, v in wins.items())
            raise AttributionError(f"replay {w.replay!r} on {device}: no energy ({why})")
        e = best.energy_j
        lo = e if best.lo_j is None else min(best.lo_j, e)
        hi = e if best.hi_j is None else max(best.hi_j, e)
        out.append(
            IsolationResult(w.replay, w.n_calls, w.duration_s, e, lo, hi, best.signal, device)
        )
    return out


def load_replays(run_dir: str | os.PathLike[str], samples, device: str) -> list[IsolationResult]:
    """The replays of `device`: isolation.csv, else the windows of isolation_windows.csv.

    Raises:
        AttributionError: the run has neither (it was made without isolation).
    """
    d = Path(run_dir)
    if (d / ISOLATION_CSV).is_file():
        return read_isolation_csv(d)
    if (d / WINDOWS_CSV).is_file():
        from jouleprof.sensors.simulated import is_simulated_device

        if is_simulated_device(device):
            raise AttributionError(
                f"{run_dir}: the simulated GPU ({device}) covers the training steps only, not the "
                "isolation replays, so --method isolation needs a run that measured a real GPU"
            )
        return results_from_windows(samples, d / WINDOWS_CSV, device)
    raise AttributionError(
        f"{run_dir} has no {ISOLATION_CSV} or {WINDOWS_CSV}: --method isolation needs a run made "
        "with isolation enabled (replay loops of each phase measured alone)"
    )


@dataclass(frozen=True)
class CallEnergy:
    """Energy and time of one call of one phase, derived from the replay loops."""

    phase: str
    energy_j: float
    energy_lo_j: float
    energy_hi_j: float
    time_s: float
    derived_from: str
    """How it was derived, e.g. "forward+backward − forward"."""


def _phase_names(results: list[IsolationResult]) -> list[str]:
    names: list[str] = []
    for r in results:
        names += [p for p in r.phases if p not in names]
    return names


def _counts(r: IsolationResult, names: list[str]) -> tuple[int, ...]:
    return tuple(r.phases.count(p) for p in names)


def split_loops(
    results: list[IsolationResult],
) -> tuple[list[IsolationResult], list[IsolationResult]]:
    """The loops of the main system, and the loops it leaves out (alternative references).

    Distinct combinations of phases are taken fewest phases first (then in the order given);
    one is kept when it is not a linear combination of those kept before it. Loops repeating
    a kept combination are kept (the system averages them by least squares); loops of a
    combination left out are left out. Without an over-determining loop all are kept, so the
    main system is the one the loops always gave.
    """
    names = _phase_names(results)
    combos: list[tuple[int, ...]] = []
    for r in results:
        c = _counts(r, names)
        if c not in combos:
            combos.append(c)
    kept: list[tuple[int, ...]] = []
    for c in sorted(combos, key=sum):  # sorted() is stable: ties stay in the order given
        if np.linalg.matrix_rank(np.array(kept + [c], dtype=float)) > len(kept):
            kept.append(c)
    main = [r for r in results if _counts(r, names) in kept]
    extra = [r for r in results if _counts(r, names) not in kept]
    return main, extra


def _mean_per_call(loops: list[IsolationResult]) -> tuple[float, float, float, float]:
    """Energy, its bounds and time per call, averaged over loops of one combination."""
    k = len(loops)
    return (
        sum(r.energy_j / r.n_calls for r in loops) / k,
        sum(r.energy_lo_j / r.n_calls for r in loops) / k,
        sum(r.energy_hi_j / r.n_calls for r in loops) / k,
        sum(r.time_s / r.n_calls for r in loops) / k,
    )


def in_place_energies(results: list[IsolationResult]) -> dict[str, CallEnergy]:
    """Energy per call of a phase where it runs: a left-out loop less the loop of its other
    phases ("optimizer" = forward+backward+optimizer − forward+backward).

    For each loop `split_loops` leaves out and each phase p it replays once, where a main loop
    replays exactly its other phases, p in place is the difference of the two, per call
    (repeated loops of one combination averaged), its bound by interval arithmetic: the
    widest the two bounds allow. Keyed by phase; phases with no such pair are left out. The
    main system (`per_call_energies`) is not affected.
    """
    main, extra = split_loops(results)
    names = _phase_names(results)
    out: dict[str, CallEnergy] = {}
    for combo in dict.fromkeys(_counts(r, names) for r in extra):
        loops = [r for r in extra if _counts(r, names) == combo]
        for j, name in enumerate(names):
            if combo[j] != 1 or name in out:
                continue
            rest = tuple(n - (i == j) for i, n in enumerate(combo))
            base = [r for r in main if _counts(r, names) == rest]
            if not base or not any(rest):
                continue
            e, lo, hi, t = _mean_per_call(loops)
            be, blo, bhi, bt = _mean_per_call(base)
            out[name] = CallEnergy(
                name, e - be, lo - bhi, hi - blo, t - bt, f"{loops[0].replay} − {base[0].replay}"
            )
    return out


def per_call_energies(results: list[IsolationResult]) -> dict[str, CallEnergy]:
    """Energy per call of every phase the replays identify, by differencing.

    Each loop of the main system (`split_loops`: loops that over-determine a phase are left
    out, see `in_place_energies`) gives the summed energy per call of the phases it replays;
    the phases form a linear system (least squares where several loops repeat one
    combination). A phase is identified when its energy is a fixed combination of loops; the
    others are left out.
    """
    results, _ = split_loops(results)
    names = _phase_names(results)
    a = np.array([_counts(r, names) for r in results], dtype=float)
    e = np.array([r.energy_j / r.n_calls for r in results])
    lo = np.array([r.energy_lo_j / r.n_calls for r in results])
    hi = np.array([r.energy_hi_j / r.n_calls for r in results])
    t = np.array([r.time_s / r.n_calls for r in results])
    m = np.linalg.pinv(a)  # phase = m @ loops
    out: dict[str, CallEnergy] = {}
    for j, name in enumerate(names):
        unit = np.zeros(len(names))
        unit[j] = 1.0
        if not np.allclose(m[j] @ a, unit, atol=1e-9):
            continue  # not identified: its energy cannot be separated from another phase's
        c = m[j]
        c[np.abs(c) < 1e-12] = 0.0
        order = sorted((i for i in range(len(c)) if c[i] != 0), key=lambda i: -c[i])
        terms = " ".join(
            f"{'+' if c[i] > 0 else '−'} "
            f"{'' if np.isclose(abs(c[i]), 1) else f'{abs(c[i]):.3g}×'}{results[i].replay}"
            for i in order
        ).removeprefix("+ ")
        out[name] = CallEnergy(
            name,
            float(c @ e),
            float(np.where(c > 0, c * lo, c * hi).sum()),
            float(np.where(c > 0, c * hi, c * lo).sum()),
            float(c @ t),
            terms,
        )
    return out


def attribute_isolation(
    results: list[IsolationResult],
    timeline: Timeline,
    device: str,
    step_energy_j: float | None = None,
) -> DeviceAttribution:
    """Scale the replays' energy per call to each phase's calls in the run's analysed steps.

    Args:
        results: the replay loops (rows of other devices are ignored).
        timeline: the run's partition (counts of each phase per analysed step).
        device: the device to attribute.
        step_energy_j: measured energy of the analysed steps, for share_pct (None: no shares).
    """
    mine = [r for r in results if r.device == device]
    if not mine:
        have = sorted({r.device for r in results})
        raise AttributionError(f"{ISOLATION_CSV} has no replay of device {device!r} (has {have})")
    calls = per_call_energies(mine)
    n_steps = timeline.n_steps
    rows: list[PhaseResult] = []
    for name in timeline.order:
        time_s = timeline.time_s[name]
        if name not in calls:
            why = "not replayed in isolation" if name != IDLE else "idle time is not replayed"
            if any(name in r.phases for r in mine):
                why = "its replays do not separate it from the other phases (add a replay)"
            rows.append(unresolved(name, time_s, n_steps, METHOD, why, device))
            continue
        c = calls[name]
        count = timeline.counts.get(name, 0)
        note = f"{count} calls × {c.energy_j:.4g} J/call ({c.derived_from})"
        if any(k.startswith(name + "/") for k in timeline.time_s):
            time_s = timeline.inclusive_time_s.get(name, time_s)
            note += "; replayed as a whole, sub-phases included"
        e = c.energy_j * count
        rows.append(
            PhaseResult(
                name,
                time_s,
                time_s / n_steps,
                e,
                c.energy_lo_j * count,
                c.energy_hi_j * count,
                c.energy_j / c.time_s if c.time_s > 0 else None,
                100.0 * e / step_energy_j if step_energy_j else None,
                METHOD,
                True,
                note,
                device,
                n_steps,
            )
        )
    notes = [
        f"replayed phase {p!r} does not occur in the analysed steps"
        for p in calls
        if p not in timeline.counts
    ]
    in_place = in_place_energies(mine)
    for p, c in in_place.items():
        iso = calls.get(p)
        vs = f" against {iso.energy_j:.4g} J isolated" if iso is not None else ""
        notes.append(
            f"{p} in place ({c.derived_from}): {c.energy_j:.4g} J/call "
            f"[{c.energy_lo_j:.4g}, {c.energy_hi_j:.4g}]{vs}; an alternative reference, "
            "not used in the phases above"
        )
    short = [r.replay for r in mine if r.time_s < MIN_LOOP_S]
    if short:
        notes.append(f"replays shorter than {MIN_LOOP_S:g} s: {short}")
    return DeviceAttribution(
        device=device,
        method=METHOD,
        phases=rows,
        n_steps=n_steps,
        warmup_steps=len(timeline.warmup_steps),
        step_time_s=timeline.step_time_s / n_steps,
        step_energy_j=step_energy_j,
        diagnostics={
            "per_call": {k: vars(v) for k, v in calls.items()},
            "replays": [r.replay for r in mine],
            "alternative_replays": [r.replay for r in split_loops(mine)[1]],
            "in_place": {k: vars(v) for k, v in in_place.items()},
        },
        notes=notes,
    )
