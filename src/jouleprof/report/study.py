"""A study directory as data: study.json, runs.csv and every cell's run.json, the means over
repetitions of each figure with its provenance, the batch-size effect, phases per batch size,
the warm-up rule the cells applied, and a representative cell per batch size.

Values come from runs.csv (the index the study writes); where each came from, or why it is
missing, comes from the cells' run.json figures. Only complete cells enter a mean; failed,
out-of-memory and incomplete cells keep their status and error. Pure functions of the files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jouleprof.errors import RunDirError
from jouleprof.report.tables import (
    missing,
    quantity,
    read_phase_files,
    read_study_json,
    sig,
    signed_pct,
    source_text,
    unavailable,
)
from jouleprof.store.rundir import RunDir
from jouleprof.types import RunRecord

log = logging.getLogger(__name__)


OK = "complete"
# runs.csv value columns: (what it is, unit)


METRICS: dict[str, tuple[str, str]] = {
    "throughput_samples_per_s": ("throughput", "samples/s"),
    "step_time_s": ("step time", "s"),
    "energy_per_sample_j": ("GPU energy per sample", "J"),
    "energy_per_1000_samples_kwh": ("GPU energy per 1,000 samples", "kWh"),
    "segment_gpu_energy_j": ("GPU energy of the measured segment", "J"),
    "segment_gpu_power_w": ("mean GPU power", "W"),
    "mfu_pct": ("model FLOP utilization", "%"),
    "floor_energy_per_sample_j": ("energy floor per sample", "J"),
    "peak_mem_allocated_bytes": ("peak memory allocated", "B"),
    "fine_overhead_pct": ("fine-mode overhead (interleaved blocks)", "%"),
    "crosscheck_energy_per_sample_j": ("cross-check energy per sample", "J"),
    "data_wait_pct": ("time waiting for data", "%"),
    "recorder_host_pct": ("phase recorder's host time", "%"),
}


_ENERGY = ("energy_per_sample_j", "segment_gpu_energy_j", "gpu_energy_j")
RELATED: dict[str, tuple[str, ...]] = {
    "energy_per_1000_samples_kwh": _ENERGY,
    "segment_gpu_power_w": _ENERGY,
    "crosscheck_energy_per_sample_j": ("crosscheck_gpu_energy_j",),
}
"""Figures whose reason explains another's absence (a cell records why energy per sample is
unavailable; the figures derived from the same energy inherit that reason)."""
HEADLINE_MODES = ("e2e", "fine")
"""Modes whose throughput and energy per 1,000 samples phrase the batch-size effect, first
available wins: e2e reads the counter about once a second (densely only around the measured
segment's edges) and records no phases, so it disturbs the run least."""


@dataclass
class Study:
    """A study directory read from disk: study.json, runs.csv and each cell's run.json."""

    path: Path
    meta: dict[str, Any]
    runs: pd.DataFrame
    records: dict[str, RunRecord]
    """Cells whose run.json could be read, by cell_id."""

    def cell_dir(self, cell_id: str) -> Path:
        row = self.runs[self.runs["cell_id"] == cell_id]
        rel = row["run_dir"].iloc[0] if len(row) and "run_dir" in row else ""
        return self.path / (rel if not missing(rel) else f"cells/{cell_id}")

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(int(b) for b in self.runs["batch_size"].dropna().unique())

    @property
    def modes(self) -> list[str]:
        seen = list(dict.fromkeys(self.runs["mode"].astype(str)))
        order = [m for m in self.meta.get("modes") or [] if m in seen]
        return order + [m for m in seen if m not in order]


def load_study(path: Path) -> Study:
    """Read a study directory. Raises RunDirError when runs.csv is missing or malformed."""
    meta = read_study_json(path)
    p = path / "runs.csv"
    if not p.is_file() or p.stat().st_size == 0:
        raise RunDirError(
            f"{path} has no runs.csv: the study has not indexed any cell yet "
            "(rerun `jouleprof study` to resume it)"
        )
    runs = pd.read_csv(p, dtype={"cell_id": str, "mode": str, "status": str})
    need = [c for c in ("cell_id", "batch_size", "mode", "status") if c not in runs.columns]
    if need:
        raise RunDirError(f"{p} lacks the columns {need}")
    runs["error"] = runs["error"].astype(object).fillna("").astype(str) if "error" in runs else ""
    runs["rep"] = pd.to_numeric(runs.get("rep", 0), errors="coerce").fillna(0).astype(int)
    runs["batch_size"] = pd.to_numeric(runs["batch_size"], errors="coerce").astype("Int64")
    for m in METRICS:
        runs[m] = pd.to_numeric(runs[m], errors="coerce") if m in runs else np.nan
    study = Study(path, meta, runs, {})
    for cid in runs["cell_id"]:
        try:
            study.records[cid] = RunDir(study.cell_dir(cid)).read_record()
        except Exception as e:  # a cell's run.json may be absent (failed early) or partial
            log.info("cell %s: no readable run.json (%s)", cid, e)
    return study


STATUS_WORDS = {
    "oom": "out of memory",
    "failed": "failed",
    "incomplete": "incomplete",
    "missing": "not run",
}
"""How a cell status reads in a reason ("out of memory in 3 of 3 cells")."""
ERROR_CHARS = 80
"""Longest error excerpt a table cell quotes; failed_cells keeps the whole error."""


def short_error(error: str, limit: int = ERROR_CHARS) -> str:
    """The first line of an error, cut at a word boundary and marked with … when longer than
    `limit` characters (the whole text stays in runs.csv and failed_cells)."""
    line = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")
    if len(line) <= limit:
        return line
    head = line[: limit + 1]
    space = head.rfind(" ")
    head = head[:space] if space > limit // 2 else line[:limit]  # one long word: cut it
    return head.rstrip(" ,;:.-(") + "…"


def cell_reason(status: str, error: str = "") -> str:
    """Why one cell has no figures, in a few words: "out of memory", "failed: <error>"."""
    word = STATUS_WORDS.get(status, status)
    if status == "oom" or not error:
        return word
    return f"{word}: {short_error(error)}"


def _status_reason(cells: pd.DataFrame) -> str:
    """Why a group of cells has no figures, e.g. "out of memory in 3 of 3 cells" or "failed in
    1 of 3 cells: RuntimeError: …" (the first error, shortened: see `short_error`)."""
    parts = []
    for status, g in cells.groupby("status", sort=False):
        errs = [e for e in dict.fromkeys(g["error"]) if e]
        err = f": {short_error(errs[0])}" if errs and status != "oom" else ""
        word = STATUS_WORDS.get(str(status), str(status))
        parts.append(f"{word} in {len(g)} of {len(cells)} cells{err}")
    return "; ".join(parts)


def _provenance(study: Study, cell_ids: list[str], metric: str) -> tuple[str, str]:
    """(source text, reason) of `metric` over these cells, from their run.json figures."""
    srcs, reasons = [], []
    for cid in cell_ids:
        f = study.records[cid].summary.get(metric) if cid in study.records else None
        if f is None:
            continue
        srcs.append(source_text(f.source.value, f.signal))
        if f.reason:
            reasons.append(f.reason)
    return ", ".join(dict.fromkeys(srcs)), "; ".join(dict.fromkeys(reasons))


def _crosscheck_reason(study: Study, cell_ids: list[str], metric: str) -> str:
    """Why codecarbon or zeus gave no energy, as the cells recorded it."""
    if metric != "crosscheck_energy_per_sample_j":
        return ""
    reasons = [
        str(cc["reason"])
        for cid in cell_ids
        if cid in study.records
        and (cc := study.records[cid].extra.get("crosscheck"))
        and cc.get("reason")
    ]
    return "; ".join(dict.fromkeys(reasons))


def aggregate(study: Study) -> pd.DataFrame:
    """Per mode, batch size and metric: mean, sd, min, max and CV over the complete cells.

    Columns: mode, batch_size, metric, unit, n_cells, n_complete, n, mean, sd, min, max,
    cv_pct, source, reason (why the value is unavailable, or caveats).
    """
    rows = []
    for mode in study.modes:
        for bs in study.batch_sizes:
            cells = study.runs[(study.runs["mode"] == mode) & (study.runs["batch_size"] == bs)]
            if not len(cells):
                continue
            ok = cells[cells["status"] == OK]
            for metric, (_label, unit) in METRICS.items():
                v = ok[metric].dropna()
                n = len(v)
                mean = float(v.mean()) if n else np.nan
                sd = float(v.std(ddof=1)) if n > 1 else np.nan
                src, why = _provenance(study, list(ok.loc[v.index, "cell_id"]), metric)
                if n == 0:
                    if not len(ok):
                        why = _status_reason(cells)
                    else:
                        ids = list(ok["cell_id"])
                        for m in (metric, *RELATED.get(metric, ())):
                            _src, why = _provenance(study, ids, m)
                            if why:
                                break
                        why = why or _crosscheck_reason(study, ids, metric)
                        why = why or f"not recorded for {mode} mode (runs.csv, run.json)"
                    src = "unavailable"
                elif n < len(cells):
                    why = f"{n} of {len(cells)} cells have it" + (f"; {why}" if why else "")
                rows.append(
                    {
                        "mode": mode,
                        "batch_size": bs,
                        "metric": metric,
                        "unit": unit,
                        "n_cells": len(cells),
                        "n_complete": len(ok),
                        "n": n,
                        "mean": mean,
                        "sd": sd,
                        "min": float(v.min()) if n else np.nan,
                        "max": float(v.max()) if n else np.nan,
                        "cv_pct": 100 * sd / mean if n > 1 and mean else np.nan,
                        "source": src or "runs.csv (source not recorded in run.json)",
                        "reason": why,
                    }
                )
    return pd.DataFrame(rows)


def agg_row(agg: pd.DataFrame, metric: str, mode: str, bs: int) -> dict[str, Any] | None:
    sel = agg[(agg["metric"] == metric) & (agg["mode"] == mode) & (agg["batch_size"] == bs)]
    return sel.iloc[0].to_dict() if len(sel) else None


def agg_text(row: dict[str, Any] | None, digits: int = 4) -> str:
    """'mean ± sd unit (n=3)', or why it is unavailable."""
    if row is None:
        return unavailable("not run")
    if not row["n"]:
        return unavailable(row["reason"])
    s = quantity(row["mean"], row["unit"], digits)
    if row["n"] > 1:
        spread = (
            quantity(row["sd"], row["unit"], 2)
            if row["unit"] in ("B", "bytes")
            else sig(row["sd"], 2)
        )
        s = s.replace(f" {row['unit']}", "") if row["unit"] not in ("B", "bytes") else s
        s = f"{s} ± {spread}" + ("" if row["unit"] in ("B", "bytes") else f" {row['unit']}")
    return f"{s} (n={row['n']})"


def headline_mode(agg: pd.DataFrame) -> str | None:
    """The mode whose figures phrase the batch-size effect (see HEADLINE_MODES)."""
    e = agg[(agg["metric"] == "energy_per_1000_samples_kwh") & (agg["n"] > 0)]
    for m in HEADLINE_MODES:
        if (e["mode"] == m).any():
            return m
    if len(e):
        return str(e["mode"].iloc[0])
    t = agg[(agg["metric"] == "throughput_samples_per_s") & (agg["n"] > 0)]
    return str(t["mode"].iloc[0]) if len(t) else None


def _clause(label: str, unit: str, a: dict | None, b: dict | None, bs_a: int, bs_b: int):
    va = a["mean"] if a and a["n"] else None
    vb = b["mean"] if b and b["n"] else None
    if va is not None and vb is not None and va != 0:
        pct = 100 * (vb - va) / va
        return f"{label} from {sig(va)} to {sig(vb)} {unit} ({signed_pct(pct)})", va, vb, pct
    gone = [(bs, r) for bs, r, v in ((bs_a, a, va), (bs_b, b, vb)) if v is None]
    why = "; ".join(f"at batch size {bs}: {(r or {}).get('reason') or 'not run'}" for bs, r in gone)
    return f"{label} unavailable ({why or 'zero at the smaller batch size'})", va, vb, None


EFFECT_METRICS = ("throughput_samples_per_s", "energy_per_1000_samples_kwh")


def _has_effect_data(agg: pd.DataFrame, mode: str | None, bs: int) -> bool:
    return mode is not None and any(
        (r := agg_row(agg, m, mode, bs)) is not None and r["n"] for m in EFFECT_METRICS
    )


def left_out_batch_sizes(study: Study, agg: pd.DataFrame, mode: str | None) -> pd.DataFrame:
    """Batch sizes the batch-size effect leaves out: `mode` has neither throughput nor energy
    there. Columns: batch_size, reason, sentence ("Batch size 128 left out: out of memory in
    3 of 3 cells")."""
    rows = []
    for bs in study.batch_sizes:
        if _has_effect_data(agg, mode, bs):
            continue
        if mode is None:
            why = "no mode has throughput or energy figures"
        else:
            rs = [agg_row(agg, m, mode, bs) for m in EFFECT_METRICS]
            whys = [r["reason"] for r in rs if r is not None and r["reason"]]
            why = "; ".join(dict.fromkeys(whys)) or f"no {mode} cell at this batch size"
        rows.append(
            {"batch_size": bs, "reason": why, "sentence": f"Batch size {bs} left out: {why}"}
        )
    return pd.DataFrame(rows, columns=["batch_size", "reason", "sentence"])


def effect_basis(study: Study, agg: pd.DataFrame, mode: str | None) -> str:
    """Which mode's figures phrase the batch-size effect, and over which cells."""
    if mode is None:
        return "Batch-size effect: no mode has throughput or energy figures at any batch size."
    ns = sorted(
        {
            int(r["n"])
            for bs in study.batch_sizes
            for m in EFFECT_METRICS
            if (r := agg_row(agg, m, mode, bs)) is not None and r["n"]
        }
    )
    n = (
        ""
        if not ns
        else f" (n={ns[0]} at each batch size)"
        if len(ns) == 1
        else f" (n={ns[0]}–{ns[-1]} per batch size)"
    )
    why = {
        "e2e": "e2e records no phases and reads the GPU energy counter about once a second, "
        "so it disturbs the run least",
        "fine": "e2e has no energy figures in this study",
    }.get(mode, "neither e2e nor fine has energy figures in this study")
    return (
        f"Batch-size effect from {mode} mode: means over its complete repetitions{n}; "
        f"cells that did not complete are left out ({why})."
    )


def batch_size_effects(study: Study, agg: pd.DataFrame, mode: str | None) -> pd.DataFrame:
    """Every pair of batch sizes with data in `mode` (smaller first): throughput and energy per
    1,000 samples. Batch sizes where `mode` has neither are left out (see
    `left_out_batch_sizes`, which says why), and "consecutive" is among those kept.

    Each row carries the seed study's sentence, e.g. "Batch size 1 → 2: throughput from 1.922
    to 2.737 samples/s (+42.4%), GPU energy per 1,000 samples from 0.0256 to 0.0187 kWh
    (−26.8%)", computed from the means over the complete repetitions of `mode`.
    """
    bss = [bs for bs in study.batch_sizes if _has_effect_data(agg, mode, bs)]
    rows = []
    for i, a in enumerate(bss):
        for b in bss[i + 1 :]:
            r = {
                "mode": mode,
                "batch_size_a": a,
                "batch_size_b": b,
                "consecutive": bss.index(b) == i + 1,
            }
            parts, whys = [], []
            for metric, label, key in (
                ("throughput_samples_per_s", "throughput", "throughput"),
                ("energy_per_1000_samples_kwh", "GPU energy per 1,000 samples", "energy_kwh"),
            ):
                ra = agg_row(agg, metric, mode, a) if mode else None
                rb = agg_row(agg, metric, mode, b) if mode else None
                text, va, vb, pct = _clause(label, METRICS[metric][1], ra, rb, a, b)
                parts.append(text)
                whys.append(text.partition(" unavailable ")[2] if pct is None else None)
                r.update(
                    {
                        f"{key}_a": va,
                        f"{key}_b": vb,
                        f"{key}_change_pct": pct,
                        f"{key}_n_a": (ra or {}).get("n"),
                        f"{key}_n_b": (rb or {}).get("n"),
                    }
                )
            if whys[0] and whys[0] == whys[1]:  # one cause for both: say it once
                parts = [f"throughput and GPU energy per 1,000 samples unavailable {whys[0]}"]
            r["sentence"] = f"Batch size {a} → {b}: " + ", ".join(parts)
            rows.append(r)
    cols = ["mode", "batch_size_a", "batch_size_b", "consecutive", "sentence"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=cols)


def _samples_per_step(rec: RunRecord | None, bs: int) -> float:
    seg = (rec.extra or {}).get("measured_segment") if rec else None
    if seg and seg.get("steps"):
        return seg["samples"] / seg["steps"]
    return float(bs)


def phase_frames(study: Study) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per complete cell with spans: exclusive phase time per step, and energy per sample by
    method (from its phases_<method>.csv). Columns of the time frame: batch_size, cell_id,
    phase, time_per_step_s; of the energy frame also method, energy_per_sample_j (lo, hi),
    resolved, note."""
    from jouleprof.report.tables import phase_time_stats

    times, energies = [], []
    ok = study.runs[study.runs["status"] == OK]
    for r in ok.itertuples(index=False):
        d = study.cell_dir(r.cell_id)
        rd = RunDir(d)
        if rd.has("spans.csv") and (d / "spans.csv").stat().st_size > 60:
            try:
                st = phase_time_stats(rd.read_spans())
            except Exception as e:  # a malformed spans.csv must not stop the report
                log.warning("cell %s: spans.csv unreadable (%s)", r.cell_id, e)
                st = None
            if st is not None and len(st):
                times.append(st.assign(batch_size=int(r.batch_size), cell_id=r.cell_id))
        ph = read_phase_files(d)
        if ph is not None:
            sps = _samples_per_step(study.records.get(r.cell_id), int(r.batch_size))
            ph = ph.assign(
                batch_size=int(r.batch_size),
                cell_id=r.cell_id,
                energy_per_sample_j=ph["energy_per_step_j"] / sps,
                energy_per_sample_lo_j=ph["energy_per_step_lo_j"] / sps,
                energy_per_sample_hi_j=ph["energy_per_step_hi_j"] / sps,
            )
            energies.append(ph)
    cols_t = ["batch_size", "cell_id", "phase", "time_per_step_s"]
    cols_e = [
        "batch_size",
        "cell_id",
        "method",
        "phase",
        "time_per_step_s",
        "energy_per_sample_j",
        "energy_per_sample_lo_j",
        "energy_per_sample_hi_j",
        "resolved",
        "note",
    ]
    t = pd.concat(times, ignore_index=True)[cols_t] if times else pd.DataFrame(columns=cols_t)
    e = pd.concat(energies, ignore_index=True)[cols_e] if energies else pd.DataFrame(columns=cols_e)
    return t, e


def warmup_statement(study: Study) -> list[str]:
    """The warm-up rule the cells applied (their notes) and how many steps it excluded."""
    rules = list(
        dict.fromkeys(
            n
            for rec in study.records.values()
            for n in rec.notes
            if n.lower().startswith("warm-up")
        )
    )
    out = [r[0].upper() + r[1:] for r in rules] or [
        "Warm-up rule: not recorded in the cells' notes."
    ]
    steps = [
        rec.extra.get("warmup_steps")
        for rec in study.records.values()
        if rec.extra.get("warmup_steps") is not None
    ]
    if steps:
        out.append(
            f"Warm-up steps excluded per cell: {min(steps)}–{max(steps)} "
            f"(median {float(np.median(steps)):g}, {len(steps)} cells)."
            if len(steps) > 1
            else f"Warm-up steps excluded: {steps[0]} (1 cell)."
        )
    never = [cid for cid, rec in study.records.items() if rec.extra.get("warmup_settled") is False]
    if never:
        out.append(f"Step time never settled during warm-up in: {', '.join(never)}.")
    return out


def study_notes(study: Study) -> list[str]:
    """What a reader must know: failed cells, cells never run, disturbed runs."""
    notes = []
    counts = study.runs["status"].value_counts()
    bad = {s: int(n) for s, n in counts.items() if s != OK}
    if bad:
        notes.append(
            f"{sum(bad.values())} of {len(study.runs)} cells did not complete ("
            + ", ".join(f"{n} {STATUS_WORDS.get(s, s)}" for s, n in bad.items())
            + "): listed below, "
            "left out of every mean."
        )
    planned = study.meta.get("batch_sizes") or []
    not_run = [b for b in planned if int(b) not in study.batch_sizes]
    if not_run:
        notes.append(f"Batch sizes in study.json with no cell in runs.csv: {not_run}.")
    dist = [cid for cid, rec in study.records.items() if rec.extra.get("disturbed")]
    if dist:
        notes.append(f"Other processes used the GPU during: {', '.join(dist)} (disturbed).")
    return notes


MODE_PREFERENCE = ("fine", "e2e")


def representative_cells(study: Study) -> dict[int, str | None]:
    """Per batch size, a complete cell with telemetry whose throughput is nearest its group's
    median (fine mode preferred, then e2e); None where no cell has sensor readings."""
    out: dict[int, str | None] = {}
    for bs in study.batch_sizes:
        out[bs] = None
        cells = study.runs[(study.runs["batch_size"] == bs) & (study.runs["status"] == OK)]
        for mode in MODE_PREFERENCE + tuple(m for m in study.modes if m not in MODE_PREFERENCE):
            c = cells[cells["mode"] == mode]
            c = c[[_has_samples(study.cell_dir(cid)) for cid in c["cell_id"]]]
            if len(c):
                thr = c["throughput_samples_per_s"]
                pick = (thr - thr.median()).abs().idxmin() if thr.notna().any() else c.index[0]
                out[bs] = str(c.loc[pick, "cell_id"])
                break
    return out


def _has_samples(cell_dir: Path) -> bool:
    p = cell_dir / "samples.csv"
    if not p.is_file():
        return False
    with p.open() as f:
        return sum(1 for _ in zip(range(2), f, strict=False)) > 1


def timeline_series(study: Study, picks: dict[int, str | None]) -> dict[int, tuple[str, Any]]:
    """Each representative cell's samples, time measured from its measured segment's start."""
    series = {}
    for bs, cid in picks.items():
        if cid is None:
            continue
        try:
            s = RunDir(study.cell_dir(cid)).read_samples()
        except RunDirError as e:
            log.warning("cell %s: %s", cid, e)
            continue
        seg = (
            (study.records[cid].extra or {}).get("measured_segment")
            if cid in study.records
            else None
        )
        t0 = float(seg["t0_s"]) if seg else float(s["t_s"].min())
        series[bs] = (cid, s.assign(t_s=s["t_s"] - t0))
    return series
