"""Runs side by side: every summary figure and every phase's energy, each run against the
first, with the differences larger than their uncertainty marked (pure: reads run directories).

A difference's uncertainty combines both runs' 95% intervals in quadrature (half-widths); a
difference is marked only where both figures carry an interval and it exceeds that. Figures from
different sources (measured against simulated, say) are flagged rather than compared silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.report.tables import num, sig
from jouleprof.store.liveness import status_text


@dataclass
class Value:
    value: float | None
    lo: float | None = None
    hi: float | None = None
    source: str = ""
    reason: str | None = None

    @property
    def half_width(self) -> float | None:
        if self.value is None or self.lo is None or self.hi is None:
            return None
        return (self.hi - self.lo) / 2

    def text(self, unit: str = "", reason: bool = True) -> str:
        if self.value is None:
            return f"unavailable ({self.reason})" if self.reason and reason else "—"
        s = f"{sig(self.value)}{' ' + unit if unit else ''}"
        if self.lo is not None and self.hi is not None:
            s += f" [{sig(self.lo)} … {sig(self.hi)}]"
        return s


@dataclass
class Diff:
    """A run's figure minus the first run's."""

    abs: float | None
    pct: float | None
    uncertainty: float | None
    """Half-width of the difference's 95% interval (None: a figure has no interval)."""
    significant: bool
    note: str = ""

    def text(self) -> str:
        if self.abs is None:
            return self.note or "—"
        s = f"{'+' if self.abs >= 0 else '−'}{sig(abs(self.abs))}"
        if self.pct is not None:
            s += f" ({'+' if self.pct >= 0 else '−'}{abs(self.pct):.1f}%)"
        if self.uncertainty is not None:
            s += f" ± {sig(self.uncertainty)}"
        if self.significant:
            s += " *"
        return s + (f" — {self.note}" if self.note else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "abs": self.abs,
            "pct": self.pct,
            "uncertainty": self.uncertainty,
            "significant": self.significant,
            "note": self.note,
        }


def diff(ref: Value, other: Value) -> Diff:
    if ref.value is None or other.value is None:
        if ref.value == other.value:
            return Diff(None, None, None, False, "")
        gone = other if other.value is None else ref
        why = gone.reason or "missing"  # "unresolved", "not attributed", "not in this run"
        return Diff(None, None, None, False, f"{'this' if gone is other else 'the first'}: {why}")
    d = other.value - ref.value
    pct = 100 * d / ref.value if ref.value else None
    note = ""
    if ref.source and other.source and ref.source != other.source:
        note = f"sources differ: {ref.source} vs {other.source}"
    hw = [ref.half_width, other.half_width]
    unc = math.hypot(*hw) if None not in hw else None  # type: ignore[arg-type]
    significant = unc is not None and abs(d) > unc and not note
    return Diff(d, pct, unc, significant, note)


@dataclass
class Row:
    """One compared quantity: a summary figure, or a (method, phase) energy per step."""

    key: str
    unit: str
    values: list[Value]
    diffs: list[Diff] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "unit": self.unit,
            "values": [vars(v) for v in self.values],
            "diffs_vs_first": [d.to_json() for d in self.diffs],
        }


@dataclass
class Comparison:
    runs: list[Path]
    names: list[str]
    figures: list[Row]
    phases: list[Row]
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [str(p) for p in self.runs],
            "names": self.names,
            "reference": self.names[0] if self.names else None,
            "figures": [r.to_json() for r in self.figures],
            "phases": [r.to_json() for r in self.phases],
            "problems": self.problems,
        }

    @property
    def n_significant(self) -> int:
        return sum(d.significant for r in self.figures + self.phases for d in r.diffs)


def _names(paths: list[Path]) -> list[str]:
    names = [p.name or str(p) for p in paths]
    if len(set(names)) < len(names):  # same leaf name: use more of the path
        names = [str(p) for p in paths]
    return names


def compare_runs(paths: list[Path]) -> Comparison:
    """Compare run directories (the first is the reference). Raises RunDirError for a path
    that holds no readable run.json."""
    from jouleprof.report.tables import read_phase_files
    from jouleprof.store.rundir import RunDir

    if len(paths) < 2:
        raise ValueError("compare needs at least two run directories")
    recs = [RunDir(p).read_record() for p in paths]
    problems = []
    keys: list[str] = []
    for rec in recs:
        keys += [k for k in rec.summary if k not in keys]
    figures = []
    for k in keys:
        vals, unit = [], ""
        for rec in recs:
            f = rec.summary.get(k)
            if f is None:
                vals.append(Value(None, reason="not in this run"))
                continue
            unit = unit or f.unit
            vals.append(Value(f.value, f.lo, f.hi, f.source.value, f.reason))
        figures.append(Row(k, unit, vals, [diff(vals[0], v) for v in vals[1:]]))
    phases: list[Row] = []
    tables = []
    for p, rec in zip(paths, recs, strict=True):
        try:
            tables.append(read_phase_files(p))
        except Exception as e:  # a malformed phases file: the figures still compare
            problems.append(f"{p}: phases unreadable ({e})")
            tables.append(None)
        status = status_text(p, rec)
        if status != "complete":
            problems.append(f"{p}: status {status}: its figures cover what it recorded")
    pairs: list[tuple[str, str]] = []
    for t in tables:
        if t is not None:
            pairs += [
                (m, ph)
                for m, ph in zip(t["method"], t["phase"], strict=True)
                if (m, ph) not in pairs
            ]
    for m, ph in pairs:
        vals = []
        for t in tables:
            r = None if t is None else t[(t["method"] == m) & (t["phase"] == ph)]
            if r is None or not len(r):
                vals.append(Value(None, reason="not attributed"))
                continue
            r = r.iloc[0]
            resolved = bool(r.get("resolved", True))
            e = num(r.get("energy_per_step_j")) if resolved else None
            src = (
                str(r.get("source"))
                if "source" in r and isinstance(r.get("source"), str)
                else "measured"
            )
            vals.append(
                Value(
                    e,
                    num(r.get("energy_per_step_lo_j")) if e is not None else None,
                    num(r.get("energy_per_step_hi_j")) if e is not None else None,
                    src,
                    None if e is not None else "unresolved",
                )
            )
        phases.append(Row(f"{m}: {ph}", "J/step", vals, [diff(vals[0], v) for v in vals[1:]]))
    return Comparison(list(paths), _names(list(paths)), figures, phases, problems)


def write_compare_html(cmp: Comparison, out: Path) -> Path:
    """The comparison as one self-contained HTML page."""
    from jouleprof.report.html import render

    return render("compare.html", out, cmp=cmp)
