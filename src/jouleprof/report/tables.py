"""Report tables of one run directory, and the formatting every report table shares.

Each table is a `Table`: the numbers (`data`, written to CSV: a missing value stays an empty
cell, next to a column saying where the value came from or why it is missing) and the text a
reader sees (`display`, written as markdown and shown in report.html: a missing value reads
"unavailable (why)", never 0). Everything here is a pure function of the files on disk.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord

log = logging.getLogger(__name__)

MINUS = "\u2212"
PHASE_METHODS = ("proportional", "regression", "isolation")
UNTRACKED = "untracked"


# -- formatting ------------------------------------------------------------------------------


def missing(v: Any) -> bool:
    """True for None, NaN, pandas NA and empty strings: a value that was not obtained."""
    if v is None:
        return True
    if isinstance(v, str):
        return v.strip() == ""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def num(v: Any) -> float | None:
    """`v` as a float, or None when it is missing or not a finite number."""
    if missing(v):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def sig(v: float, digits: int = 4) -> str:
    """`v` with `digits` significant digits, in positional notation (1.922, 0.0256, 5436)."""
    if v == 0:
        return "0"
    if abs(v) >= 10**digits:
        return f"{v:,.0f}"
    s = np.format_float_positional(v, precision=digits, unique=False, fractional=False, trim="-")
    return s.replace("-", MINUS)


def signed_pct(v: float, digits: int = 1) -> str:
    """A signed percentage with a true minus sign: +42.4%, −26.8%."""
    return f"{v:+.{digits}f}%".replace("-", MINUS)


def quantity(v: float, unit: str, digits: int = 4) -> str:
    """A value with its unit; bytes are shown in GiB (or MiB below 1 GiB)."""
    if unit in ("B", "bytes"):
        return (
            f"{sig(v / 2**30, digits)} GiB" if abs(v) >= 2**30 else f"{sig(v / 2**20, digits)} MiB"
        )
    return f"{sig(v, digits)} {unit}".rstrip()


def unavailable(reason: str | None) -> str:
    return f"unavailable ({reason or 'no reason recorded'})"


def source_text(source: str | None, signal: str | None = None) -> str:
    if not source:
        return "not recorded"
    return f"{source} ({signal})" if signal else source


def figure_value_text(f: Figure) -> str:
    """The value of a summary Figure with its interval, or why it is unavailable."""
    if f.value is None:
        return unavailable(f.reason)
    s = quantity(f.value, f.unit)
    if f.lo is not None and f.hi is not None:
        if f.unit in ("B", "bytes"):
            s += f" [{quantity(f.lo, f.unit)} … {quantity(f.hi, f.unit)}]"
        else:
            s += f" [{sig(f.lo)} … {sig(f.hi)}]"
    return s


# -- tables ----------------------------------------------------------------------------------


@dataclass
class Table:
    """One report table: `data` for CSV, `display` (strings) for markdown and HTML."""

    name: str
    """File stem under report/ (name.csv, name.md)."""
    title: str
    data: pd.DataFrame
    display: pd.DataFrame
    note: str = ""
    """Says where the numbers come from; shown under the table."""
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return len(self.data) == 0


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-style markdown table (no extra dependency)."""

    def cell(v: Any) -> str:
        return "" if missing(v) else str(v).replace("|", "\\|").replace("\n", " ")

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_table(table: Table, out_dir: Path) -> Table:
    """Write name.csv (numbers) and name.md (title, text table, note) under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{table.name}.csv"
    md_path = out_dir / f"{table.name}.md"
    table.data.to_csv(csv_path, index=False)
    body = f"## {table.title}\n\n" + markdown(table.display)
    if table.note:
        body += f"\n{table.note}\n"
    md_path.write_text(body)
    table.paths = {"csv": csv_path, "md": md_path}
    return table


# -- one run ---------------------------------------------------------------------------------


def read_optional_csv(path: Path) -> pd.DataFrame | None:
    """A CSV of the run directory, or None when it is absent, empty or unreadable."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        log.warning("%s unreadable: %s", path, e)
        return None
    return df if len(df) else None


def read_study_json(study_dir: Path) -> dict[str, Any]:
    """A study directory's study.json ({} when it has none); RunDirError when it is not JSON."""
    import json

    from jouleprof.errors import RunDirError

    p = study_dir / "study.json"
    if not p.is_file():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise RunDirError(f"{p} is not valid JSON: {e}") from e


def summary_table(record: RunRecord, reasons: Any = None) -> Table:
    """Every summary figure of run.json: value, bounds, source, signal, and why if unavailable.

    With `reasons` (report.answer.Reasons), an unavailable figure reads "unavailable [n]" and
    its reason is said once, as reason n, in the report's list of reasons."""
    rows, shown = [], []
    for key, f in record.summary.items():
        rows.append(
            {
                "figure": key,
                "value": f.value,
                "unit": f.unit,
                "lo": f.lo,
                "hi": f.hi,
                "source": f.source.value,
                "signal": f.signal,
                "reason": f.reason,
            }
        )
        shown.append(
            {
                "figure": key,
                "value": figure_value_text(f)
                if f.value is not None or reasons is None
                else f"unavailable [{reasons.number(f.reason, key)}]",
                "source": source_text(f.source.value, f.signal),
                "note": f.reason if f.value is not None and f.reason else "",
            }
        )
    cols = ["figure", "value", "unit", "lo", "hi", "source", "signal", "reason"]
    return Table(
        "summary",
        "Summary figures",
        pd.DataFrame(rows, columns=cols),
        pd.DataFrame(shown, columns=["figure", "value", "source", "note"]),
        note="Bounds in brackets are the figure's uncertainty interval; source says whether it "
        "was measured (and from which sensor signal), estimated (and how), or is unavailable.",
    )


def read_phase_files(run_dir: Path) -> pd.DataFrame | None:
    """Every attribution the run holds (phases_<method>.csv; else phases.csv), stacked.

    Returns None when the run holds none. Adds energy per step and its bounds.
    """
    frames = []
    for method in PHASE_METHODS:
        p = run_dir / f"phases_{method}.csv"
        if p.is_file() and p.stat().st_size:
            frames.append(pd.read_csv(p))
    if not frames and (run_dir / "phases.csv").is_file():
        frames.append(RunDir(run_dir).read_phases())
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    if "device" not in df.columns:
        df["device"] = ""
    df["device"] = df["device"].fillna("").astype(str)
    # With several devices, the "total" rows sum them; show those, else the single device's.
    keep = []
    for _method, g in df.groupby("method", sort=False):
        keep.append(g[g["device"] == "total"] if (g["device"] == "total").any() else g)
    df = pd.concat(keep, ignore_index=True)
    if "resolved" not in df.columns:
        df["resolved"] = df["energy_j"].notna()
    df["resolved"] = df["resolved"].astype(str).str.lower().isin(("true", "1"))
    if "n_steps" in df.columns and df["n_steps"].notna().all():
        steps = df["n_steps"].astype(float).clip(lower=1)
    elif "time_per_step_s" in df.columns:
        steps = (df["time_s"] / df["time_per_step_s"]).round().clip(lower=1)
    else:
        steps = pd.Series(1.0, index=df.index)
    df["steps"] = steps
    for col in ("energy_j", "energy_lo_j", "energy_hi_j"):
        df[col.replace("energy", "energy_per_step")] = (
            pd.to_numeric(df[col], errors="coerce") / steps
        )
    if "time_per_step_s" not in df.columns:
        df["time_per_step_s"] = df["time_s"] / steps
    for col in ("mean_power_w", "share_pct", "note"):
        if col not in df.columns:
            df[col] = np.nan if col != "note" else ""
    return df


def phase_energy_table(phases: pd.DataFrame) -> Table:
    """Energy per step of each phase by each method, its interval, and unresolved phases marked."""
    cols = [
        "method",
        "device",
        "phase",
        "time_per_step_s",
        "energy_per_step_j",
        "energy_per_step_lo_j",
        "energy_per_step_hi_j",
        "mean_power_w",
        "share_pct",
        "resolved",
        "note",
    ]
    data = phases[cols].copy()
    shown = []
    for r in data.itertuples(index=False):
        if r.resolved and num(r.energy_per_step_j) is not None:
            e = f"{sig(r.energy_per_step_j)} J"
            lo, hi = num(r.energy_per_step_lo_j), num(r.energy_per_step_hi_j)
            interval = f"{sig(lo)} … {sig(hi)} J" if lo is not None and hi is not None else "—"
            power = f"{sig(r.mean_power_w)} W" if num(r.mean_power_w) is not None else "—"
            share = f"{r.share_pct:.1f}%" if num(r.share_pct) is not None else "—"
        else:
            e, interval, power, share = unavailable("unresolved: " + str(r.note or "")), "", "", ""
        shown.append(
            {
                "method": r.method,
                "phase": r.phase,
                "time/step": f"{sig(1e3 * r.time_per_step_s)} ms",
                "energy/step": e,
                "interval/step": interval,
                "mean power": power,
                "share": share,
                "note": "" if not r.resolved else str(r.note if not missing(r.note) else ""),
            }
        )
    return Table(
        "phase_energy",
        "Energy per phase and step, by attribution method",
        data,
        pd.DataFrame(shown),
        note="From phases_<method>.csv (attribution over the measured segment): proportional "
        "splits each step's measured energy by time share; regression fits each phase's power to "
        "every sensor interval (bootstrap interval); isolation replays phases alone. Unresolved "
        "phases are shown as such, never as 0.",
    )


def method_comparison_table(phases: pd.DataFrame) -> Table | None:
    """Per phase, each method's energy per step and how far each is from the reference
    (isolation where the run has it, else regression); None with fewer than two methods."""
    methods = list(dict.fromkeys(phases["method"]))
    if len(methods) < 2:
        return None
    ref = "isolation" if "isolation" in methods else "regression"
    piv = phases[phases["resolved"]].pivot_table(
        index="phase", columns="method", values="energy_per_step_j", sort=False
    )
    piv = piv.reindex(index=list(dict.fromkeys(phases["phase"])), columns=methods)
    data = piv.reset_index()
    shown = pd.DataFrame({"phase": data["phase"]})
    for m in methods:
        shown[f"{m} J/step"] = [unavailable("unresolved") if missing(v) else sig(v) for v in piv[m]]
    for m in methods:
        if m == ref:
            continue
        pct = 100 * (piv[m] - piv[ref]) / piv[ref]
        data[f"{m}_vs_{ref}_pct"] = pct.to_numpy()
        shown[f"{m} vs {ref}"] = ["—" if missing(v) else signed_pct(v) for v in pct]
    return Table(
        "phase_methods",
        f"Attribution methods compared (reference: {ref})",
        data,
        shown,
        note=f"(method − {ref}) / {ref}, energy per step. '—' where either is unresolved.",
    )


def exclusive_phase_times(spans: pd.DataFrame) -> pd.DataFrame:
    """Per step and phase, the time of the phase not covered by its sub-phases (and untracked).

    A parent's time minus its direct children's ("forward" minus "forward/target" and
    "forward/context"); "untracked" is the step's extent not covered by any top-level phase.
    Returns columns step, phase, time_s.
    """
    s = spans.assign(d=spans["t1_s"] - spans["t0_s"])
    incl = s.groupby(["step", "phase"], sort=False)["d"].sum().reset_index()
    incl["parent"] = incl["phase"].str.rpartition("/")[0]
    child = incl[incl["parent"] != ""].groupby(["step", "parent"])["d"].sum()
    idx = pd.MultiIndex.from_frame(incl[["step", "phase"]])
    incl["time_s"] = (incl["d"].to_numpy() - child.reindex(idx).fillna(0.0).to_numpy()).clip(0)
    hull = s.groupby("step").agg(t0=("t0_s", "min"), t1=("t1_s", "max"))
    top = incl[incl["parent"] == ""].groupby("step")["d"].sum()
    untracked = ((hull["t1"] - hull["t0"]) - top.reindex(hull.index).fillna(0.0)).clip(lower=0)
    extra = pd.DataFrame({"step": hull.index, "phase": UNTRACKED, "time_s": untracked.to_numpy()})
    return pd.concat([incl[["step", "phase", "time_s"]], extra], ignore_index=True)


def phase_time_stats(spans: pd.DataFrame) -> pd.DataFrame:
    """Per phase: exclusive time per step (mean, sd, median, 10th/90th percentile), steps seen,
    share of the step."""
    ex = exclusive_phase_times(spans)
    n_steps = ex["step"].nunique()
    order = list(dict.fromkeys(ex["phase"]))
    g = ex.groupby("phase", sort=False)["time_s"]
    out = pd.DataFrame(
        {
            "phase": order,
            "time_per_step_s": [g.get_group(p).sum() / n_steps for p in order],
            "time_sd_s": [g.get_group(p).std(ddof=1) for p in order],
            "time_median_s": [g.get_group(p).median() for p in order],
            "time_p10_s": [g.get_group(p).quantile(0.1) for p in order],
            "time_p90_s": [g.get_group(p).quantile(0.9) for p in order],
            "steps_seen": [g.get_group(p).size for p in order],
        }
    )
    out["share_pct"] = 100 * out["time_per_step_s"] / out["time_per_step_s"].sum()
    out["steps"] = n_steps
    return out


def phase_time_table(stats: pd.DataFrame) -> Table:
    shown = [
        {
            "phase": r.phase,
            "time/step (mean)": f"{sig(1e3 * r.time_per_step_s)} ms",
            "sd": "—" if num(r.time_sd_s) is None else f"{sig(1e3 * r.time_sd_s, 2)} ms",
            "median": f"{sig(1e3 * r.time_median_s)} ms",
            "share of step": f"{r.share_pct:.1f}%",
            "steps": f"{r.steps_seen}/{r.steps}",
        }
        for r in stats.itertuples(index=False)
    ]
    return Table(
        "phase_time",
        "Time per phase and step (exclusive)",
        stats,
        pd.DataFrame(shown),
        note="Measured from spans.csv (the phase recorder's boundaries). Exclusive: a parent "
        "phase's own time excludes its sub-phases; 'untracked' is step time no phase covers.",
    )


def run_facts(record: RunRecord, status: str | None = None) -> list[tuple[str, str]]:
    """Key facts of the run for the report's header (what ran, on what, which segment)."""
    cell = (record.config or {}).get("cell") or {}
    wl = (record.config or {}).get("workload") or {}
    ex = record.extra or {}
    status = status or record.status.value
    facts = [("run", record.run_id), ("kind", record.kind), ("status", status)]
    if ex.get("mode") or cell.get("mode"):
        facts.append(("mode", str(ex.get("mode") or cell.get("mode"))))
    if cell:
        facts.append(("workload", f"{cell.get('workload')} / {cell.get('preset')}"))
    bs = wl.get("batch_size", cell.get("batch_size"))
    if bs is not None:
        facts.append(("batch size", str(bs)))
    gpus = (record.hardware or {}).get("gpus")
    if isinstance(gpus, list):
        facts.append(("GPUs", ", ".join(str(g.get("name", "?")) for g in gpus) or "none"))
    elif isinstance(gpus, dict):
        facts.append(("GPUs", unavailable(gpus.get("reason"))))
    seg = ex.get("measured_segment")
    if seg:
        facts.append(
            (
                "measured segment",
                f"{sig(seg['t1_s'] - seg['t0_s'])} s, {seg.get('steps')} "
                f"steps, {seg.get('samples')} samples (t = {sig(seg['t0_s'])} … "
                f"{sig(seg['t1_s'])} s)",
            )
        )
    if ex.get("warmup_steps") is not None:
        facts.append(("warm-up steps excluded", str(ex["warmup_steps"])))
    git = record.git or {}
    if git.get("revision"):
        facts.append(
            ("git", f"{str(git['revision'])[:12]}{' (dirty)' if git.get('dirty') else ''}")
        )
    return facts


def run_notes(record: RunRecord, status: str | None = None) -> list[str]:
    """Notes a reader must see: run.json's notes and what the extra fields imply."""
    ex = record.extra or {}
    notes = list(record.notes)
    status = status or record.status.value
    if status != "complete":
        notes.append(f"run status is {status}: figures cover what was recorded")
    if ex.get("oom"):
        notes.append("the run ran out of GPU memory")
    if ex.get("disturbed") and not any("disturbed" in n for n in notes):
        notes.append("other processes used a measured GPU: figures are disturbed")
    if ex.get("warmup_settled") is False:
        notes.append(f"step times never settled within {ex.get('warmup_steps')} warm-up steps")
    for method, st in (ex.get("attribution") or {}).items():
        if not isinstance(st, dict):
            continue
        if not st.get("ok", True):
            notes.append(f"attribution by {method} not possible: {st.get('reason')}")
        for device, ch in (st.get("model") or {}).items():
            res = ch.get("residual_rms_w") or {}
            notes.append(
                f"{device}: phase energy by regression with the {ch.get('chosen')} model "
                f"(residual RMS {res.get('plain', float('nan')):.1f} W with one power per "
                f"phase, {res.get('stall', float('nan')):.1f} W with work plus host stalls)"
            )
        for device, ch in (st.get("bins") or {}).items():
            res = ch.get("residual_rms_w") or {}
            how = (
                f"cut into ~{1e3 * ch.get('bin_s', float('nan')):g} ms bins"
                if ch.get("chosen")
                else "kept whole"
            )
            notes.append(
                f"{device}: long phases {how} (residual RMS per degree of freedom "
                f"{res.get('whole', float('nan')):.1f} W whole, "
                f"{res.get('binned', float('nan')):.1f} W in bins)"
            )
    if isinstance(ex.get("attribution"), dict) and ex["attribution"].get("reason"):
        notes.append(f"no phase attribution: {ex['attribution']['reason']}")
    for err in (ex.get("sampler") or {}).get("errors") or []:
        notes.append(f"sensor read error: {err}")
    return list(dict.fromkeys(notes))


def overhead_text(record: RunRecord) -> str | None:
    """Fine mode's interleaved overhead as one sentence, or None when not measured."""
    ov = (record.extra or {}).get("overhead")
    if not ov or ov.get("overhead_pct") is None:
        return None
    return (
        f"Recorder overhead {signed_pct(ov['overhead_pct'], 2)} "
        f"[{signed_pct(ov['ci_lo_pct'], 2)}, {signed_pct(ov['ci_hi_pct'], 2)}] "
        f"({100 * ov.get('confidence', 0.95):.0f}% CI) — {sig(1e3 * ov['instrumented_step_s'])} vs "
        f"{sig(1e3 * ov['base_step_s'])} ms per step, {ov.get('n_pairs')} interleaved block pairs "
        "in the same process (measured, host timer)."
    )
