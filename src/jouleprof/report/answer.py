"""The answer a run's report leads with: its energy, energy per sample, where the energy went
(phase energy with intervals, by method where several exist), and where each figure came from.

Pure functions of a RunRecord and its phases table; the HTML (report/html.py) shows them first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from jouleprof.report.tables import Table, num, sig
from jouleprof.types import Figure, RunRecord

# Headline figures, in order; the first key of each group that the run holds is shown.
HEADLINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPU energy of the measured segment", ("segment_gpu_energy_j",)),
    ("GPU energy of the whole run", ("gpu_energy_j",)),
    ("GPU energy of the recorded phases (SIMULATED GPU)", ("simulated_gpu_phase_energy_j",)),
    ("Energy per sample", ("energy_per_sample_j",)),
    ("Energy per 1,000 samples", ("energy_per_1000_samples_kwh",)),
    ("Mean GPU power", ("segment_gpu_power_w", "gpu0.avg_power_w")),
    ("Throughput", ("throughput_samples_per_s",)),
    ("Step time", ("step_time_s",)),
    ("CPU energy", ("cpu_energy_j",)),
)
SOURCE_WORDS = {
    "measured": "measured",
    "estimated": "estimated",
    "predicted": "predicted",
    "simulated": "SIMULATED",
    "unavailable": "unavailable",
}


@dataclass
class Headline:
    """One headline figure: what it is, its run.json key, its value text and its source."""

    label: str
    key: str
    figure: Figure
    reason_no: int | None = None
    """The number of its reason in the report's list of reasons (unavailable figures)."""

    @property
    def source(self) -> str:
        return self.figure.source.value

    @property
    def text(self) -> str:
        f = self.figure
        if f.value is None:
            return "unavailable"
        return f"{sig(f.value)} {f.unit}".strip()

    @property
    def interval(self) -> str:
        f = self.figure
        if f.value is None or f.lo is None or f.hi is None:
            return ""
        return f"[{sig(f.lo)} … {sig(f.hi)}] {f.unit}".strip()


@dataclass
class Reasons:
    """Each distinct reason a figure is unavailable, numbered once, and the figures it covers."""

    items: list[tuple[str, list[str]]] = field(default_factory=list)

    def number(self, reason: str | None, figure: str) -> int:
        reason = reason or "no reason recorded"
        for i, (r, figs) in enumerate(self.items):
            if r == reason:
                if figure not in figs:
                    figs.append(figure)
                return i + 1
        self.items.append((reason, [figure]))
        return len(self.items)

    def covers(self, note: str) -> bool:
        """Whether `note` only repeats one of the reasons (then it is not said again)."""
        return any(r in note for r, _ in self.items if len(r) > 12)


def simulated_banner(rec: RunRecord) -> str | None:
    """A sentence saying the energies are simulated, or None where nothing is."""
    sim = (rec.extra or {}).get("simulated_gpu")
    sim_figs = [k for k, f in rec.summary.items() if f.source.value == "simulated"]
    if not sim and not sim_figs:
        return None
    text = ""
    if isinstance(sim, dict):
        text = str(sim.get("note") or sim.get("reason") or "")
    if not text:
        text = next((n for n in rec.notes if n.startswith("SIMULATED")), "")
    return text or (
        "SIMULATED: these energies come from the package's simulated GPU, not from a measured "
        f"one ({len(sim_figs)} figures have source 'simulated')."
    )


def trained_on(rec: RunRecord) -> str:
    """Which device trained (and which GPUs were measured), as one phrase."""
    ex = rec.extra or {}
    dev = ex.get("trained_on") or ((rec.config or {}).get("cell") or {}).get("device")
    gpus = (rec.hardware or {}).get("gpus")
    names = [str(g.get("name", "?")) for g in gpus] if isinstance(gpus, list) else []
    if dev is None:
        where = "not recorded" + (f" (GPUs measured: {', '.join(names)})" if names else "")
    elif str(dev).startswith("cuda"):
        where = f"GPU ({dev}{': ' + ', '.join(names) if names else ''})"
    else:
        where = f"{dev.upper() if dev == 'cpu' else dev}"
    if (ex.get("simulated_gpu")) and str(dev) == "cpu":
        where += " — no GPU trained; the GPU figures are simulated"
    return where


def headlines(rec: RunRecord, reasons: Reasons) -> list[Headline]:
    out = []
    for label, keys in HEADLINE:
        key = next((k for k in keys if k in rec.summary), None)
        if key is None:
            continue
        h = Headline(label, key, rec.summary[key])
        if h.figure.value is None:
            h.reason_no = reasons.number(h.figure.reason, key)
        out.append(h)
    return out


def phase_breakdown(phases: pd.DataFrame | None, source: str) -> Table | None:
    """Phase × method: energy per step with its interval and share (None without phases).

    A phase a method cannot resolve says so; the methods stand side by side so their agreement
    is visible at a glance.
    """
    if phases is None or not len(phases):
        return None
    methods = list(dict.fromkeys(phases["method"]))
    order = list(dict.fromkeys(phases["phase"]))
    rows, shown = [], []
    for phase in order:
        row: dict[str, Any] = {"phase": phase}
        disp: dict[str, Any] = {"phase": phase}
        for m in methods:
            r = phases[(phases["phase"] == phase) & (phases["method"] == m)]
            if not len(r):
                disp[m] = "—"
                continue
            r = r.iloc[0]
            e, lo, hi = (
                num(r.get(c))
                for c in ("energy_per_step_j", "energy_per_step_lo_j", "energy_per_step_hi_j")
            )
            share = num(r.get("share_pct"))
            row.update({f"{m}_j": e, f"{m}_lo_j": lo, f"{m}_hi_j": hi, f"{m}_share_pct": share})
            if not bool(r.get("resolved", e is not None)) or e is None:
                disp[m] = "unresolved"
                continue
            text = f"{sig(e)} J"
            if lo is not None and hi is not None:
                text += f" [{sig(lo)} … {sig(hi)}]"
            if share is not None:
                text += f" · {share:.1f}%"
            disp[m] = text
        rows.append(row)
        shown.append(disp)
    src = "simulated GPU" if source == "simulated" else source
    return Table(
        "phase_breakdown",
        "Where the energy went: energy per step of each phase",
        pd.DataFrame(rows),
        pd.DataFrame(shown),
        note=f"Source: {src}. Per training step, with the 95% interval in brackets and the share "
        "of the step's energy; one column per attribution method the run holds. 'unresolved': "
        "the method cannot separate that phase (see the phase table below), never 0.",
    )


def phases_source(phases: pd.DataFrame | None, rec: RunRecord) -> str:
    """measured, or simulated where the phase table or the run says so."""
    if phases is not None and "source" in phases.columns:
        vals = set(phases["source"].dropna().astype(str))
        if "simulated" in vals:
            return "simulated"
    if (rec.extra or {}).get("simulated_gpu"):
        return "simulated"
    return "measured" if phases is not None else "unavailable"


def flat_facts(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A nested dict (hardware, environment) as (dotted key, text) rows; a {value: None,
    reason} entry reads 'unavailable (reason)'."""
    out: list[tuple[str, str]] = []
    if isinstance(d, dict):
        if set(d) <= {"value", "reason"} and "reason" in d and d.get("value") is None:
            return [(prefix, f"unavailable ({d['reason']})")]
        for k, v in d.items():
            out += flat_facts(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, list):
        if all(not isinstance(v, dict | list) for v in d):
            return [(prefix, ", ".join(str(v) for v in d))]
        for i, v in enumerate(d):
            out += flat_facts(v, f"{prefix}[{i}]")
    else:
        out.append((prefix, "" if d is None else str(d)))
    return out
