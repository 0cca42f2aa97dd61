"""The report of a video study (`jouleprof study video`). It leads with the study's answer: each
model's best configuration by NS#, and whether the runner-up is inside the measurement's
uncertainty. Then come the confirmation over seeds, what PEFT saves in training against full
fine-tuning, the cells that did not finish, and every cell.

It is built from the cells' run.json alone, through the rows `jouleprof summarize` tabulates
(report.video_summary), so the page and video_summary.md say the same.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from jouleprof.report.figures import Plot, colors, new_figure, save
from jouleprof.report.tables import Table


def is_video_study(study_dir: Path) -> bool:
    """Whether study.json is a video study's."""
    try:
        return json.loads((study_dir / "study.json").read_text()).get("study") == "video"
    except (OSError, ValueError, AttributeError):
        return False


def _num(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.{digits}f}"


def _plain(statement: str) -> str:
    """A video_summary statement (a markdown list item) as a sentence."""
    return statement.removeprefix("- ").replace("**", "")


def sentences(best: list[dict[str, Any]]) -> list[str]:
    """The answer, one sentence a model."""
    from jouleprof.report.video_summary import _config, _statement

    out = []
    for b in best:
        if b["best"] is not None:
            out.append(_plain(_statement(b)))
        elif b.get("by_top1"):
            out.append(
                f"{b['model']}: no run has an NS# (it needs the deployed model's GPU memory and "
                f"power); by validation top-1 the best is {_config(b['by_top1'])} "
                f"({_num(b['by_top1']['val_top1_pct'])} %)."
            )
        else:
            out.append(f"{b['model']}: no complete search run.")
    return out


def answer_table(best: list[dict[str, Any]]) -> Table:
    from jouleprof.report.video_summary import _config, _interval

    data, shown = [], []
    for b in best:
        r = b["best"] or b.get("by_top1") or {}
        row = {
            "model": b["model"],
            "best": _config(r) if r else None,
            "ranked_by": "NS#" if b["best"] is not None else "val top-1 (no NS#)",
            "val_top1_pct": r.get("val_top1_pct"),
            "train_peak_mem_mib": r.get("train_peak_mem_mib"),
            "train_j_per_step": r.get("train_j_per_step"),
            "deploy_energy_per_clip_j": r.get("deploy_energy_per_clip_j"),
            "ns_hash": r.get("ns_hash"),
            "ns_hash_lo": r.get("ns_hash_lo"),
            "ns_hash_hi": r.get("ns_hash_hi"),
            "tied_runs": len(b["tied"]),
            "runs": b["n_runs"],
        }
        data.append(row)
        shown.append(
            {
                "model": row["model"],
                "best": row["best"] or "no complete run",
                "ranked by": row["ranked_by"],
                "val top-1 %": _num(row["val_top1_pct"]),
                "peak train MiB": _num(row["train_peak_mem_mib"], 0),
                "train J/step": _num(row["train_j_per_step"]),
                "deploy J/clip": _num(row["deploy_energy_per_clip_j"], 3),
                "NS#": _num(row["ns_hash"]),
                "NS# interval": _interval(r) if b["best"] is not None else "n/a",
                "tied with": row["tied_runs"],
                "runs": row["runs"],
            }
        )
    return Table(
        "answer",
        "Best configuration per model by NS# (search runs)",
        pd.DataFrame(data),
        pd.DataFrame(shown),
        note="NS# from the deployed model's latency, power and peak memory with the "
        "validation top-1; its interval is the measurement's. 'tied with' counts runs whose "
        "interval overlaps the best's: the meter cannot order them.",
    )


def confirmation_table(rows: list[dict[str, Any]]) -> Table | None:
    from jouleprof.report.video_summary import confirm_table

    conf = confirm_table(rows)
    if not conf:
        return None
    data = pd.DataFrame(conf)

    def ms(c, k):
        return f"{_num(c[k])} ± {_num(c[k + '_sd'])}"

    shown = pd.DataFrame(
        [
            {
                "model": c["model"],
                "configuration": c["config"],
                "seeds": c["seeds"],
                "test top-1 %": ms(c, "test_top1_pct"),
                "val top-1 %": ms(c, "val_top1_pct"),
                "NS#": ms(c, "ns_hash"),
            }
            for c in conf
        ]
    )
    return Table(
        "confirmation",
        "Confirmation (mean ± sd over seeds, with test)",
        data,
        shown,
        note="Each model's best search configuration trained again for each seed.",
    )


def savings_table(rows: list[dict[str, Any]]) -> Table | None:
    from jouleprof.report.video_summary import _j_step_interval, peft_savings

    savings = peft_savings(rows)
    if not savings:
        return None
    peft_rows = [
        {k: v for k, v in s.items() if k not in ("row", "full")}
        | {"cell_id": s["row"]["cell_id"], "full_cell_id": s["full"]["cell_id"]}
        for s in savings
    ]
    shown = [
        {
            "model": s["model"],
            "precision": s["precision"] + (", ckpt" if s["checkpointing"] else ""),
            "method": s["method"],
            "peak MiB (× full)": f"{_num(s['row']['train_peak_mem_mib'], 0)} "
            f"({_num(s['mem_ratio'])})",
            "s/step (× full)": f"{_num(s['row']['train_s_per_step'], 3)} "
            f"({_num(s['s_per_step_ratio'])})",
            "J/step [bounds]": _j_step_interval(s["row"]),
            "full's J/step [bounds]": _j_step_interval(s["full"]),
        }
        for s in savings
    ]
    return Table(
        "peft_savings",
        "What PEFT saves in training (against full fine-tuning, same precision)",
        pd.DataFrame(peft_rows),
        pd.DataFrame(shown),
        note="Search runs; of several learning rates, the one with the best validation top-1.",
    )


def cells_table(rows: list[dict[str, Any]]) -> Table:
    from jouleprof.report.video_summary import COLUMNS

    data = pd.DataFrame(rows, columns=list(COLUMNS))
    keep = [
        "cell_id",
        "status",
        "val_top1_pct",
        "train_peak_mem_mib",
        "train_s_per_step",
        "train_j_per_step",
        "deploy_energy_per_clip_j",
        "deploy_measured_in",
        "ns_hash",
        "energy_source",
    ]
    return Table("video_runs", "Every cell", data, data[keep], note="All columns: video_runs.csv.")


def ns_plot(rows: list[dict[str, Any]], out_dir: Path) -> Plot:
    title = "NS# per search run"
    d = [
        r
        for r in rows
        if r["status"] == "complete"
        and r.get("stage") not in ("smoke", "confirm")
        and r.get("ns_hash") is not None
    ]
    if not d:
        return Plot("ns_hash", title, reason="no search run has an NS# (it needs GPU readings)")
    d.sort(key=lambda r: (r["model"], -r["ns_hash"]))
    fig, axes = new_figure(width_in=9, height_in=max(2.5, 0.28 * len(d) + 1))
    ax = axes[0][0]
    col = colors(sorted({r["model"] for r in d}))
    y = list(range(len(d)))
    lo = [max(r["ns_hash"] - (r.get("ns_hash_lo") or r["ns_hash"]), 0) for r in d]
    hi = [max((r.get("ns_hash_hi") or r["ns_hash"]) - r["ns_hash"], 0) for r in d]
    ax.barh(y, [r["ns_hash"] for r in d], xerr=[lo, hi], capsize=3,
            color=[col[r["model"]] for r in d])  # fmt: skip
    ax.set_yticks(y, [r["cell_id"] for r in d], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("NS# (higher is better)")
    lo_x = min(r.get("ns_hash_lo") or r["ns_hash"] for r in d)
    ax.set_xlim(left=max(0.0, lo_x - 5))
    path = save(fig, out_dir, "ns_hash")
    return Plot(
        "ns_hash",
        title,
        path,
        caption="Each search run's NS# with the interval the measurement gives it (error "
        "bars), colored by model, best first within each model.",
    )


def cost_plot(rows: list[dict[str, Any]], out_dir: Path) -> Plot:
    title = "Accuracy against training energy"
    d = [
        r
        for r in rows
        if r["status"] == "complete"
        and r.get("stage") != "smoke"
        and r.get("train_j_per_step")
        and r.get("val_top1_pct") is not None
    ]
    if not d:
        return Plot("accuracy_energy", title, reason="no complete run has a training energy")
    fig, axes = new_figure(width_in=7.5, height_in=4.2)
    ax = axes[0][0]
    col = colors(sorted({r["model"] for r in d}))
    marks = dict(zip(sorted({r["method"] for r in d}), "osD^v<>ph*", strict=False))
    for model in sorted(col):
        for method in sorted(marks):
            pts = [r for r in d if r["model"] == model and r["method"] == method]
            if pts:
                ax.scatter(
                    [r["train_j_per_step"] for r in pts],
                    [r["val_top1_pct"] for r in pts],
                    color=col[model],
                    marker=marks[method],
                    label=f"{model} {method}",
                )
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("training energy per step (J)")
    ax.set_ylabel("validation top-1 (%)")
    ax.legend(fontsize=7)
    path = save(fig, out_dir, "accuracy_energy")
    return Plot(
        "accuracy_energy",
        title,
        path,
        caption="Each search and confirmation run: its validation top-1 against its training "
        "energy per step (color: model, marker: method).",
    )


def build(study_dir: Path):
    """report.html and report/ of a video study (returns report.html.Report)."""
    from jouleprof.report.html import REPORT_HTML, Report, fresh_report_dir, guarded, render
    from jouleprof.report.matrix_study import (
        short_meta,
        simulated_banner,
        status_text,
        unfinished_table,
    )
    from jouleprof.report.tables import read_study_json, write_table
    from jouleprof.report.video_summary import best_per_model, cell_rows

    meta = read_study_json(study_dir)
    rows = cell_rows(study_dir)
    out = fresh_report_dir(study_dir)
    best = best_per_model(rows)
    said = sentences(best)
    plots = [
        guarded("ns_hash", "NS# per search run", ns_plot, rows, out),
        guarded("accuracy_energy", "Accuracy against training energy", cost_plot, rows, out),
    ]
    unfinished = unfinished_table(
        pd.DataFrame([r for r in rows if r["status"] != "complete"]),
        "An out-of-memory cell is a result; the error of any other is in "
        "cells/<cell_id>/error.txt and cell.log.",
    )
    tables = [
        write_table(t, out)
        for t in (
            answer_table(best),
            confirmation_table(rows),
            savings_table(rows),
            unfinished,
            cells_table(rows),
        )
        if t is not None
    ]
    sources = sorted({r["energy_source"] for r in rows if r.get("energy_source")})
    n_sim = sum(r.get("energy_source") == "simulated" for r in rows)
    report = Report("study", study_dir, plots=plots, tables=tables, sentences=said)
    report.html = render(
        "video_study.html",
        study_dir / REPORT_HTML,
        name=study_dir.name,
        meta=short_meta(meta),
        sentences=said,
        status_counts=status_text(pd.Series([r["status"] for r in rows], dtype=object)) or "none",
        energy_sources=", ".join(sources) or "n/a",
        simulated=simulated_banner(n_sim),
        tables={t.name: t for t in tables},
        plots={p.name: p for p in plots},
    )
    return report
