"""What an attribution returns: one row per phase per device, and a comparison of two methods.

Every figure says how it was made (`method`) and how sure it is (`energy_lo_j`, `energy_hi_j`);
a phase the data cannot pin down has ``resolved=False``, ``energy_j=None`` and a `note` saying
why. It is never reported as zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from jouleprof.attribution.common import IDLE

TOTAL_DEVICE = "total"
EXTRA_COLUMNS: tuple[str, ...] = (
    "device",
    "time_per_step_s",
    "mean_power_w",
    "share_pct",
    "resolved",
    "n_steps",
    "note",
)


def pct_text(pct: float) -> str:
    """A percentage with one decimal, or two significant digits below 1 % (0.021)."""
    return f"{pct:.1f}" if abs(pct) >= 1 else f"{pct:.2g}"


@dataclass(frozen=True)
class PhaseResult:
    """One phase's time and energy over the analysed steps of one device.

    Attributes:
        phase: the exclusive label ("forward", "forward/target", "untracked", "idle").
        time_s: exclusive time over all analysed steps.
        time_per_step_s: time_s / number of analysed steps.
        energy_j: energy over all analysed steps; None when unresolved.
        energy_lo_j, energy_hi_j: the confidence interval (method-specific, see `method`).
        mean_power_w: energy_j / time_s (for isolation: the replayed phase's own power).
        share_pct: share of the analysed steps' energy (None for idle time between steps).
        method: proportional, regression or isolation.
        resolved: False when the data cannot pin the figure down; `note` says why.
        note: why unresolved, or caveats.
        device: the device the figure belongs to, or "total".
        n_steps: how many steps were analysed.
        estimate_j, estimate_lo_j, estimate_hi_j: for an unresolved regression phase, the
            fit's own figure and interval that were not good enough to report (diagnostics
            only, e.g. for how many steps it would need: `attribution.steps_needed`); None
            otherwise.
        n_rows: sensor intervals overlapping the phase (regression), or None.
        noise_hw_j: the part of the interval's half-width that the block bootstrap gives
            (regression): the noise, which falls as 1/√steps; the rest (the sensor model's
            spread, the moves of bin and buffer-window lengths) does not. None: not known.
    """

    phase: str
    time_s: float
    time_per_step_s: float
    energy_j: float | None
    energy_lo_j: float | None
    energy_hi_j: float | None
    mean_power_w: float | None
    share_pct: float | None
    method: str
    resolved: bool
    note: str = ""
    device: str = ""
    n_steps: int = 0
    estimate_j: float | None = None
    estimate_lo_j: float | None = None
    estimate_hi_j: float | None = None
    n_rows: int | None = None
    noise_hw_j: float | None = None

    def __post_init__(self) -> None:
        if not self.resolved and self.energy_j is not None:
            raise ValueError(f"unresolved phase {self.phase!r} must have energy_j None")
        if self.resolved and self.energy_j is None:
            raise ValueError(f"resolved phase {self.phase!r} needs an energy_j")

    @property
    def rel_halfwidth(self) -> float | None:
        """Half the interval's width relative to the estimate (0.05: ±5 %)."""
        if self.energy_j in (None, 0) or self.energy_lo_j is None or self.energy_hi_j is None:
            return None
        return 0.5 * (self.energy_hi_j - self.energy_lo_j) / abs(self.energy_j)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["rel_halfwidth"] = self.rel_halfwidth
        return d


def unresolved(
    phase: str, time_s: float, n_steps: int, method: str, note: str, device: str = ""
) -> PhaseResult:
    """A phase whose energy the data cannot give: energy None and the reason."""
    return PhaseResult(
        phase,
        time_s,
        time_s / n_steps if n_steps else 0.0,
        None,
        None,
        None,
        None,
        None,
        method,
        False,
        note,
        device,
        n_steps,
    )


@dataclass
class DeviceAttribution:
    """Attribution of one device's energy to phases.

    Attributes:
        step_energy_j: energy of all the analysed steps together (phases and untracked time)
            by this method, as the phases' energies are; share_pct is relative to it.
            `step_time_s` is per step; JSON also gives `energy_per_step_j`.
        diagnostics: method-specific figures (fit residuals, row counts, refresh grid, ...).
    """

    device: str
    method: str
    phases: list[PhaseResult]
    n_steps: int
    warmup_steps: int
    step_time_s: float
    step_energy_j: float | None
    step_energy_lo_j: float | None = None
    step_energy_hi_j: float | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def phase(self, name: str) -> PhaseResult:
        for p in self.phases:
            if p.phase == name:
                return p
        raise KeyError(f"no phase {name!r}; phases: {[p.phase for p in self.phases]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "method": self.method,
            "n_steps": self.n_steps,
            "warmup_steps": self.warmup_steps,
            "step_time_s": self.step_time_s,
            "step_energy_j": self.step_energy_j,
            "energy_per_step_j": (
                self.step_energy_j / self.n_steps
                if self.step_energy_j is not None and self.n_steps
                else None
            ),
            "step_energy_lo_j": self.step_energy_lo_j,
            "step_energy_hi_j": self.step_energy_hi_j,
            "phases": [p.to_json() for p in self.phases],
            "diagnostics": self.diagnostics,
            "notes": self.notes,
        }


def _sum_opt(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))  # type: ignore[arg-type]


@dataclass
class AttributionResult:
    """Attribution of every analysed device; `total` sums the devices phase by phase."""

    method: str
    devices: list[DeviceAttribution]

    def device(self, name: str) -> DeviceAttribution:
        for d in self.devices:
            if d.device == name:
                return d
        raise KeyError(f"no device {name!r}; devices: {[d.device for d in self.devices]}")

    @property
    def total(self) -> list[PhaseResult]:
        """Per phase, the sum over devices (intervals added end to end: conservative).

        A phase unresolved on any device is unresolved in the total.
        """
        if len(self.devices) == 1:
            return list(self.devices[0].phases)
        names: list[str] = []
        for d in self.devices:
            names += [p.phase for p in d.phases if p.phase not in names]
        step_e = _sum_opt([d.step_energy_j for d in self.devices])
        out = []
        for name in names:
            rows = [p for d in self.devices for p in d.phases if p.phase == name]
            n_steps = max(p.n_steps for p in rows)
            time_s = sum(p.time_s for p in rows)
            missing = len(rows) < len(self.devices) or not all(p.resolved for p in rows)
            if missing:
                why = "; ".join(f"{p.device}: {p.note}" for p in rows if not p.resolved)
                out.append(
                    unresolved(name, time_s, n_steps, self.method, why or "absent on a device")
                )
                out[-1] = replace(out[-1], device=TOTAL_DEVICE)
                continue
            e = float(sum(p.energy_j for p in rows))  # type: ignore[misc]
            share = None
            if name != IDLE and step_e:
                share = 100.0 * e / step_e
            out.append(
                PhaseResult(
                    name,
                    time_s,
                    time_s / n_steps if n_steps else 0.0,
                    e,
                    _sum_opt([p.energy_lo_j for p in rows]),
                    _sum_opt([p.energy_hi_j for p in rows]),
                    e / time_s if time_s > 0 else None,
                    share,
                    self.method,
                    True,
                    "sum over devices",
                    TOTAL_DEVICE,
                    n_steps,
                )
            )
        return out

    def rows(self) -> list[PhaseResult]:
        """Every device's rows, then the total's when there is more than one device."""
        out = [p for d in self.devices for p in d.phases]
        if len(self.devices) > 1:
            out += self.total
        return out

    def to_frame(self):  # -> pandas.DataFrame
        """phases.csv as a DataFrame: the DESIGN columns, then EXTRA_COLUMNS."""
        import pandas as pd

        from jouleprof.types import PHASE_COLUMNS

        cols = list(PHASE_COLUMNS) + list(EXTRA_COLUMNS)
        return pd.DataFrame([asdict(p) for p in self.rows()], columns=cols)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "devices": [d.to_json() for d in self.devices],
            "total": [p.to_json() for p in self.total] if len(self.devices) > 1 else None,
        }


def _phase_map(results: Any) -> dict[str, PhaseResult]:
    if isinstance(results, AttributionResult):
        rows = results.total
    elif isinstance(results, DeviceAttribution):
        rows = results.phases
    else:
        rows = list(results)
    return {p.phase: p for p in rows}


def compare(results_a: Any, results_b: Any) -> dict[str, float | None]:
    """Per phase, 100 × (a − b) / b: how far method a is from reference b, in percent.

    Accepts AttributionResult (its total), DeviceAttribution or a list of PhaseResult. A phase
    unresolved in either, or missing from either, maps to None.
    """
    a, b = _phase_map(results_a), _phase_map(results_b)
    out: dict[str, float | None] = {}
    for name in list(a) + [n for n in b if n not in a]:
        pa, pb = a.get(name), b.get(name)
        if pa is None or pb is None or pa.energy_j is None or not pb.energy_j:
            out[name] = None
        else:
            out[name] = 100.0 * (pa.energy_j - pb.energy_j) / pb.energy_j
    return out
