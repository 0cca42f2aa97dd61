"""Report tables of a study directory (`report.study` holds the data they are made of): means
per mode and batch size, the batch-size effect, overhead, agreement between modes, run-to-run
spread, efficiency against the physical limit, phases per batch size, failed cells, every cell.

Each table keeps numbers (CSV) and text (markdown/HTML) apart; a missing value reads
"unavailable (why)" in the text and stays an empty cell in the CSV.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from jouleprof.report.study import METRICS, OK, Study, agg_row, agg_text, cell_reason
from jouleprof.report.tables import Table, missing, num, quantity, sig, signed_pct, unavailable

log = logging.getLogger(__name__)


SUMMARY_METRICS = (
    "throughput_samples_per_s",
    "energy_per_1000_samples_kwh",
    "energy_per_sample_j",
    "segment_gpu_power_w",
    "peak_mem_allocated_bytes",
    "data_wait_pct",
)


def aggregate_table(study: Study, agg: pd.DataFrame) -> Table:
    shown = []
    for mode in study.modes:
        for bs in study.batch_sizes:
            if agg_row(agg, "throughput_samples_per_s", mode, bs) is None:
                continue
            r = {"mode": mode, "batch size": bs}
            for metric in SUMMARY_METRICS:
                row = agg_row(agg, metric, mode, bs)
                r[METRICS[metric][0]] = agg_text(row) + (
                    f" — {row['source']}" if row and row["n"] else ""
                )
            shown.append(say_reason_once(r, [METRICS[m][0] for m in SUMMARY_METRICS]))
    return Table(
        "summary_by_cell_group",
        "Mean ± sd over repetitions, per mode and batch size",
        agg,
        pd.DataFrame(shown),
        note="Over complete cells only; sd is the sample standard deviation over "
        "repetitions; the source of each value is that of its cells' run.json figure.",
    )


def effects_table(
    effects: pd.DataFrame,
    mode: str | None,
    consecutive: bool,
    left_out: pd.DataFrame | None = None,
    basis: str = "",
) -> Table:
    """The batch-size effect: one row per pair of batch sizes with data (CSV and markdown), then
    one markdown row per batch size left out, saying why (the CSV keeps the pairs only)."""
    df = effects[effects["consecutive"].astype(bool)] if consecutive and len(effects) else effects
    name = "batch_size_effect" if consecutive else "batch_size_effect_all_pairs"
    title = (
        "Batch-size effect, consecutive batch sizes"
        if consecutive
        else "Batch-size effect, every pair of batch sizes"
    )
    shown = [
        {"batch sizes": f"{a} → {b}", "effect": s}
        for a, b, s in zip(
            df.get("batch_size_a", []),
            df.get("batch_size_b", []),
            df.get("sentence", []),
            strict=True,
        )
    ]
    if left_out is not None:
        shown += [
            {"batch sizes": str(bs), "effect": s}
            for bs, s in zip(left_out["batch_size"], left_out["sentence"], strict=True)
        ]
    basis = basis or f"Means over the complete repetitions of {mode or 'no'} mode."
    return Table(
        name,
        title,
        df.reset_index(drop=True),
        pd.DataFrame(shown, columns=["batch sizes", "effect"]),
        note=f"{basis} Measured: throughput by the host timer around the measured segment, "
        "energy from the GPU energy counter; change = (larger − smaller) / smaller.",
    )


def overhead_table(study: Study, agg: pd.DataFrame) -> Table:
    """Each mode's throughput relative to baseline, and fine mode's interleaved overhead.

    ratio = mean throughput of the mode / mean of baseline at the same batch size; its sd
    propagates both arms' run-to-run spread (relative sds added in quadrature); overhead is the
    throughput lost, (1 − ratio) × 100. Fine mode also measures its recorder's overhead side by
    side in one process (blocks with and without it), which is free of run-to-run noise.
    """
    rows = []
    for bs in study.batch_sizes:
        base = agg_row(agg, "throughput_samples_per_s", "baseline", bs)
        for mode in study.modes:
            if mode == "baseline":
                continue
            m = agg_row(agg, "throughput_samples_per_s", mode, bs)
            if m is None:
                continue
            r: dict[str, Any] = {
                "batch_size": bs,
                "mode": mode,
                "comparison": "throughput vs baseline (across runs)",
            }
            if base and base["n"] and m["n"]:
                ratio = m["mean"] / base["mean"]
                rel = np.hypot(m["sd"] / m["mean"], base["sd"] / base["mean"])
                r.update(
                    ratio=ratio,
                    ratio_sd=ratio * rel,
                    overhead_pct=100 * (1 - ratio),
                    overhead_sd_pct=100 * ratio * rel,
                    n=min(m["n"], base["n"]),
                    reason="",
                )
            else:
                why = (base or {}).get("reason") if not (base and base["n"]) else m["reason"]
                r.update(
                    ratio=np.nan,
                    ratio_sd=np.nan,
                    overhead_pct=np.nan,
                    overhead_sd_pct=np.nan,
                    n=0,
                    reason=why or "no baseline cell at this batch size",
                )
            rows.append(r)
        fine = agg_row(agg, "fine_overhead_pct", "fine", bs)
        if fine is not None:
            ids = study.runs[
                (study.runs["mode"] == "fine")
                & (study.runs["batch_size"] == bs)
                & (study.runs["status"] == OK)
            ]["cell_id"]
            figs = [
                study.records[c].summary.get("fine_overhead_pct") for c in ids if c in study.records
            ]
            los = [f.lo for f in figs if f is not None and f.lo is not None]
            his = [f.hi for f in figs if f is not None and f.hi is not None]
            rows.append(
                {
                    "batch_size": bs,
                    "mode": "fine",
                    "comparison": "recorder on vs off, interleaved blocks (same process)",
                    "ratio": np.nan,
                    "ratio_sd": np.nan,
                    "overhead_pct": fine["mean"],
                    "overhead_sd_pct": fine["sd"],
                    "n": fine["n"],
                    "ci_lo_pct": min(los) if los else np.nan,
                    "ci_hi_pct": max(his) if his else np.nan,
                    "reason": fine["reason"] if not fine["n"] else "",
                }
            )
        host = agg_row(agg, "recorder_host_pct", "fine", bs)
        if host is not None and host["n"]:  # studies before it was recorded have none
            rows.append(
                {
                    "batch_size": bs,
                    "mode": "fine",
                    "comparison": "recorder's own host time per step (estimated)",
                    "ratio": np.nan,
                    "ratio_sd": np.nan,
                    "overhead_pct": host["mean"],
                    "overhead_sd_pct": host["sd"],
                    "n": host["n"],
                    "reason": "",
                }
            )
    data = pd.DataFrame(rows)
    shown = []
    for r in data.to_dict("records"):
        if missing(r.get("overhead_pct")):
            ov = unavailable(r.get("reason"))
        else:
            ov = signed_pct(r["overhead_pct"], 2)
            if not missing(r.get("overhead_sd_pct")):
                ov += f" ± {r['overhead_sd_pct']:.2f}"
            if not missing(r.get("ci_lo_pct")):
                ov += (
                    f" (cells' 95% CIs span {signed_pct(r['ci_lo_pct'], 2)} … "
                    f"{signed_pct(r['ci_hi_pct'], 2)})"
                )
            ov += f" (n={r['n']})"
        shown.append(
            {
                "batch size": r["batch_size"],
                "mode": r["mode"],
                "comparison": r["comparison"],
                "throughput ratio": "—"
                if missing(r.get("ratio"))
                else f"{r['ratio']:.4f}"
                + ("" if missing(r.get("ratio_sd")) else f" ± {r['ratio_sd']:.4f}"),
                "overhead": ov,
            }
        )
    return Table(
        "overhead",
        "Overhead of each mode",
        data,
        pd.DataFrame(shown),
        note="Across runs: throughput lost relative to baseline (measured, host timer; "
        "± combines both modes' run-to-run sd). Interleaved: the phase recorder's own "
        "cost, blocks with and without it alternating in one fine-mode process. Host time: "
        "what the recorder spends on the host per step over the step time, the most it can "
        "add to a step the host paces.",
    )


def energy_per_sample_source(agg: pd.DataFrame, mode: str) -> str:
    """Which runs.csv column gives `mode`'s energy per sample (cross-check tools have their own)."""
    own = agg[(agg["metric"] == "energy_per_sample_j") & (agg["mode"] == mode) & (agg["n"] > 0)]
    return "energy_per_sample_j" if len(own) else "crosscheck_energy_per_sample_j"


def agreement_table(study: Study, agg: pd.DataFrame) -> Table:
    """Energy per sample of each mode per batch size, and how far each is from e2e and fine."""
    rows = []
    for bs in study.batch_sizes:
        refs = {}
        for ref in ("e2e", "fine"):
            rr = agg_row(agg, "energy_per_sample_j", ref, bs)
            refs[ref] = rr["mean"] if rr and rr["n"] else None
        for mode in study.modes:
            if mode == "baseline":
                continue
            metric = energy_per_sample_source(agg, mode)
            r = agg_row(agg, metric, mode, bs)
            if r is None:
                continue
            row = {
                "batch_size": bs,
                "mode": mode,
                "figure": metric,
                "mean_j": r["mean"],
                "sd_j": r["sd"],
                "n": r["n"],
                "source": r["source"],
                "reason": r["reason"],
            }
            for ref, v in refs.items():
                ok = r["n"] and v and ref != mode
                row[f"vs_{ref}_pct"] = 100 * (r["mean"] - v) / v if ok else np.nan
            rows.append(row)
    data = pd.DataFrame(rows)
    shown = []
    for r in data.to_dict("records"):
        row = agg_row(agg, r["figure"], r["mode"], r["batch_size"])
        shown.append(
            {
                "batch size": r["batch_size"],
                "mode": r["mode"],
                "energy per sample": agg_text(row) + (f" — {r['source']}" if r["n"] else ""),
                "vs e2e": "—" if missing(r["vs_e2e_pct"]) else signed_pct(r["vs_e2e_pct"]),
                "vs fine": "—" if missing(r["vs_fine_pct"]) else signed_pct(r["vs_fine_pct"]),
            }
        )
    return Table(
        "energy_agreement",
        "Agreement of end-to-end energy between modes",
        data,
        pd.DataFrame(shown),
        note="GPU energy per sample over the measured segment: e2e and fine from "
        "jouleprof's counter reads, codecarbon and zeus from those tools (cross-checks). "
        "vs = (mode − reference) / reference, on means over repetitions; '—' where the "
        "reference is unavailable or is the mode itself.",
    )


SPREAD_METRICS = (
    "throughput_samples_per_s",
    "step_time_s",
    "energy_per_sample_j",
    "energy_per_1000_samples_kwh",
    "segment_gpu_power_w",
)


def spread_table(study: Study, agg: pd.DataFrame) -> Table:
    """Run-to-run coefficient of variation (sd / mean) of each figure per mode and batch size."""
    sel = agg[agg["metric"].isin(SPREAD_METRICS)]
    data = sel[["mode", "batch_size", "metric", "n", "mean", "sd", "cv_pct", "reason"]]
    shown = []
    for mode in study.modes:
        for bs in study.batch_sizes:
            r0 = agg_row(agg, SPREAD_METRICS[0], mode, bs)
            if r0 is None:
                continue
            row = {"mode": mode, "batch size": bs}
            for metric in SPREAD_METRICS:
                r = agg_row(agg, metric, mode, bs)
                if not r or not r["n"]:
                    row[METRICS[metric][0]] = unavailable((r or {}).get("reason"))
                elif r["n"] < 2:
                    row[METRICS[metric][0]] = "— (one repetition: no spread)"
                else:
                    row[METRICS[metric][0]] = f"{r['cv_pct']:.2f}% (n={r['n']})"
            shown.append(say_reason_once(row, [METRICS[m][0] for m in SPREAD_METRICS]))
    return Table(
        "spread",
        "Run-to-run spread (coefficient of variation)",
        data,
        pd.DataFrame(shown),
        note="CV = sample sd / mean over the complete repetitions of a cell group.",
    )


def failed_table(study: Study) -> Table:
    """Cells that did not complete (failed, out of memory, unavailable, incomplete)."""
    bad = study.runs[study.runs["status"] != OK]
    cols = [
        c
        for c in ("cell_id", "batch_size", "mode", "rep", "status", "error", "run_dir")
        if c in bad.columns
    ]
    data = bad[cols].reset_index(drop=True)
    shown = data.drop(columns=[c for c in ("run_dir",) if c in data]).copy()
    shown["error"] = [e or "(no error recorded)" for e in shown["error"]]
    return Table(
        "failed_cells",
        "Cells that did not complete",
        data,
        shown,
        note="Not counted in any mean; the study went on past each of them.",
    )


def efficiency_table(study: Study, agg: pd.DataFrame) -> Table:
    """MFU, joules per sample and the physical floor (FLOPs / H200 bf16 FLOP per joule)."""
    rows, shown = [], []
    for bs in study.batch_sizes:
        for mode in study.modes:
            r = {
                k: agg_row(agg, k, mode, bs)
                for k in ("mfu_pct", "energy_per_sample_j", "floor_energy_per_sample_j")
            }
            if r["mfu_pct"] is None:
                continue
            e, fl = r["energy_per_sample_j"], r["floor_energy_per_sample_j"]
            ratio = e["mean"] / fl["mean"] if e["n"] and fl["n"] and fl["mean"] else np.nan
            rows.append(
                {
                    "batch_size": bs,
                    "mode": mode,
                    "mfu_pct": r["mfu_pct"]["mean"],
                    "energy_per_sample_j": e["mean"],
                    "floor_energy_per_sample_j": fl["mean"],
                    "times_floor": ratio,
                }
            )
            shown.append(
                say_reason_once(
                    {
                        "batch size": bs,
                        "mode": mode,
                        "MFU": agg_text(r["mfu_pct"]) + _src(r["mfu_pct"]),
                        "energy per sample": agg_text(e) + _src(e),
                        "floor": agg_text(fl) + _src(fl),
                        "× floor": "—" if missing(ratio) else f"{ratio:,.1f}×",
                    },
                    ["MFU", "energy per sample", "floor"],
                )
            )
    return Table(
        "efficiency",
        "Efficiency against the physical limit",
        pd.DataFrame(rows),
        pd.DataFrame(shown),
        note="MFU is estimated: counted FLOPs per sample × throughput / the GPU's bf16 "
        "dense datasheet peak. The floor is estimated: counted FLOPs per sample / 1.13 "
        "TFLOP per joule (H200 bf16 matmul, measured). Energy per sample is measured.",
    )


def say_reason_once(row: dict[str, Any], cols: list[str]) -> dict[str, Any]:
    """Where every value column of a display row is unavailable for the same reason, keep the
    reason in the first and put "—" in the others (one reason per row, not one per column)."""
    vals = [row.get(c) for c in cols]
    first = vals[0] if vals else None
    if (
        len(cols) > 1
        and isinstance(first, str)
        and first.startswith("unavailable")
        and all(v == first for v in vals)
    ):
        row.update({c: "—" for c in cols[1:]})
    return row


def _src(row: dict[str, Any] | None) -> str:
    return f" — {row['source']}" if row and row["n"] else ""


# -- phases per batch size -------------------------------------------------------------------


def phase_time_by_batch(times: pd.DataFrame) -> Table:
    g = times.groupby(["batch_size", "phase"], sort=False)["time_per_step_s"]
    data = (
        g.agg(["mean", "std", "count"])
        .reset_index()
        .rename(columns={"mean": "time_per_step_s", "std": "sd_s", "count": "n"})
    )
    shown = pd.DataFrame(
        {
            "batch size": data["batch_size"],
            "phase": data["phase"],
            "time/step": [
                f"{sig(1e3 * m)} ms" + ("" if missing(s) else f" ± {sig(1e3 * s, 2)}") + f" (n={n})"
                for m, s, n in zip(data["time_per_step_s"], data["sd_s"], data["n"], strict=True)
            ],
        }
    )
    return Table(
        "phase_time_by_batch",
        "Phase time per step, per batch size",
        data,
        shown,
        note="Measured from each cell's spans.csv (exclusive time: a parent phase "
        "without its sub-phases); mean ± sd over repetitions.",
    )


def phase_energy_by_batch(energies: pd.DataFrame) -> Table:
    rows = []
    for (bs, method, phase), g in energies.groupby(["batch_size", "method", "phase"], sort=False):
        res = g[g["resolved"]]
        v = pd.to_numeric(res["energy_per_sample_j"], errors="coerce").dropna()
        notes = [str(n) for n in dict.fromkeys(g.loc[~g["resolved"], "note"]) if not missing(n)]
        rows.append(
            {
                "batch_size": bs,
                "method": method,
                "phase": phase,
                "energy_per_sample_j": v.mean() if len(v) else np.nan,
                "sd_j": v.std(ddof=1) if len(v) > 1 else np.nan,
                "lo_j": res["energy_per_sample_lo_j"].mean() if len(v) else np.nan,
                "hi_j": res["energy_per_sample_hi_j"].mean() if len(v) else np.nan,
                "n_resolved": len(v),
                "n": len(g),
                "time_per_step_s": g["time_per_step_s"].mean(),
                "note": "; ".join(notes),
            }
        )
    data = pd.DataFrame(
        rows,
        columns=[
            "batch_size",
            "method",
            "phase",
            "energy_per_sample_j",
            "sd_j",
            "lo_j",
            "hi_j",
            "n_resolved",
            "n",
            "time_per_step_s",
            "note",
        ],
    )
    shown = []
    for r in data.itertuples(index=False):
        if r.n_resolved:
            e = f"{sig(r.energy_per_sample_j)} J"
            e += "" if missing(r.sd_j) else f" ± {sig(r.sd_j, 2)}"
            if not missing(r.lo_j) and not missing(r.hi_j):
                e += f" [{sig(r.lo_j)} … {sig(r.hi_j)}]"
            e += f" (resolved in {r.n_resolved} of {r.n})" if r.n_resolved < r.n else f" (n={r.n})"
        else:
            e = unavailable("unresolved: " + (r.note or "no cell resolved it"))
        shown.append(
            {
                "batch size": r.batch_size,
                "method": r.method,
                "phase": r.phase,
                "energy per sample": e,
            }
        )
    return Table(
        "phase_energy_by_batch",
        "Phase energy per sample, per batch size and method",
        data,
        pd.DataFrame(shown),
        note="From each fine cell's attribution (phases_<method>.csv), per sample = per "
        "step / samples per step; mean ± sd over repetitions, [mean attribution "
        "interval]. A phase unresolved in a repetition is left out of its mean.",
    )


# -- notes and representatives ---------------------------------------------------------------


CELL_METRICS = ("throughput_samples_per_s", "energy_per_1000_samples_kwh", "mfu_pct")


def cells_table(study: Study) -> Table:
    """Every cell of runs.csv: status and its main figures (missing values say why)."""
    shown = []
    for r in study.runs.to_dict("records"):
        rec = study.records.get(r["cell_id"])
        row = {
            "cell": r["cell_id"],
            "batch size": r["batch_size"],
            "mode": r["mode"],
            "rep": r["rep"],
            "status": r["status"],
        }
        for metric in CELL_METRICS:
            v = num(r.get(metric))
            if v is not None:
                row[METRICS[metric][0]] = quantity(v, METRICS[metric][1])
            else:
                f = rec.summary.get(metric) if rec else None
                why = (
                    cell_reason(r["status"], r.get("error") or "")
                    if r["status"] != OK
                    else (f.reason if f is not None else None) or "not recorded"
                )
                row[METRICS[metric][0]] = unavailable(why)
        shown.append(say_reason_once(row, [METRICS[m][0] for m in CELL_METRICS]))
    data = study.runs.copy()
    if "error" in data:  # the whole error stays in failed_cells (and runs.csv)
        at = list(data.columns).index("error")
        reasons = [
            "" if st == OK else cell_reason(st, err)
            for st, err in zip(data["status"], data["error"], strict=True)
        ]
        data = data.drop(columns=["error"])
        data.insert(at, "reason", reasons)
    return Table(
        "cells",
        "Every cell",
        data,
        pd.DataFrame(shown),
        note="runs.csv as the study wrote it, with each error shortened to a reason (the "
        "whole error is in failed_cells); each cell's run directory holds its raw CSVs "
        "(samples, spans, steps) and run.json.",
    )
