"""The report of any study run through bench/matrix.py: the answer first (which cell used the
least energy per sample, every complete cell's energy with its interval and source), then the
cells that did not finish and the whole index.

Used for study directories whose runs.csv is not the V-JEPA2 batch-size × mode matrix (that one
has its own page, report/study.py). Reads study.json, runs.csv and each cell's run.json only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from jouleprof.report.figures import Plot, new_figure, save
from jouleprof.report.tables import Table, read_study_json, sig

ENERGY_KEYS = ("energy_per_sample_j", "segment_gpu_energy_j", "gpu_energy_j", "energy_j")
"""The figure the answer ranks cells by: the first of these the study's cells hold (else the
first figure in joules)."""
FIXED = ("cell_id", "status", "error", "run_dir")


def _figure(run_dir: Path, key: str) -> dict[str, Any]:
    try:
        return (json.loads((run_dir / "run.json").read_text()).get("summary") or {}).get(key) or {}
    except (OSError, json.JSONDecodeError):
        return {}


def _is_simulated(run_dir: Path) -> bool:
    try:
        d = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool((d.get("extra") or {}).get("simulated_gpu"))


def load(study_dir: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    from jouleprof.errors import RunDirError

    meta = read_study_json(study_dir)
    p = study_dir / "runs.csv"
    if not p.is_file() or p.stat().st_size == 0:
        raise RunDirError(
            f"{study_dir} has no runs.csv: run `jouleprof collect {study_dir}` to index its runs"
        )
    runs = pd.read_csv(p, dtype={"cell_id": str, "status": str})
    if "status" not in runs.columns:
        raise RunDirError(f"{p} lacks the column status")
    runs["error"] = runs.get("error", pd.Series("", index=runs.index)).fillna("").astype(str)
    return meta, runs


def answer_table(study_dir: Path, runs: pd.DataFrame) -> tuple[Table | None, str, str | None]:
    """Complete cells ranked by energy (lowest first), each value with its interval and source;
    the sentence that states the answer; the key ranked by."""
    cols = [c for c in runs.columns if c not in FIXED and runs[c].notna().any()]
    key = next((k for k in ENERGY_KEYS if k in cols), None)
    key = key or next((c for c in cols if c.endswith("_j") and c in runs.columns[4:]), None)
    done = runs[runs["status"].isin(("complete", "oom"))]
    if key is None or not len(done):
        why = "no complete cell has an energy figure" if len(done) else "no cell is complete"
        return None, f"No answer yet: {why}.", None
    factors = [c for c in runs.columns[1 : list(runs.columns).index("status")] if c not in FIXED]
    rows, shown = [], []
    for r in done.sort_values(key, na_position="last").itertuples(index=False):
        r = r._asdict()
        f = _figure(study_dir / str(r["run_dir"]), key)
        v, lo, hi, src = f.get("value"), f.get("lo"), f.get("hi"), f.get("source", "not recorded")
        rows.append({"cell_id": r["cell_id"], **{c: r[c] for c in factors}, key: v,
                     f"{key}_lo": lo, f"{key}_hi": hi, "source": src})  # fmt: skip
        text = "unavailable" if v is None else f"{sig(v)} {f.get('unit', '')}".strip()
        if v is not None and lo is not None and hi is not None:
            text += f" [{sig(lo)} … {sig(hi)}]"
        shown.append({"cell": r["cell_id"], **{c: r[c] for c in factors}, key: text, "source": src})
    data = pd.DataFrame(rows)
    best = data.iloc[0]
    where = ", ".join(f"{c}={best[c]}" for c in factors)
    sentence = (
        f"Lowest {key}: cell {best['cell_id']}{f' ({where})' if where else ''} at "
        f"{sig(best[key])}"
        + (
            f" [{sig(best[f'{key}_lo'])} … {sig(best[f'{key}_hi'])}]"
            if pd.notna(best[f"{key}_lo"])
            else ""
        )
        + f", {best['source']}; {len(done)} of {len(runs)} cells finished."
    )
    table = Table(
        "answer",
        f"Complete cells by {key} (lowest first)",
        data,
        pd.DataFrame(shown),
        note="Values from each cell's run.json with their 95% interval and source.",
    )
    return table, sentence, key


def energy_plot(data: pd.DataFrame, key: str, out_dir: Path) -> Plot:
    title = f"{key} per cell"
    d = data[data[key].notna()]
    if not len(d):
        return Plot("cell_energy", title, reason="no complete cell has this figure")
    fig, axes = new_figure(width_in=9, height_in=max(2.5, 0.3 * len(d) + 1))
    ax = axes[0][0]
    y = range(len(d))
    lo = (d[key] - d[f"{key}_lo"]).clip(lower=0).fillna(0)
    hi = (d[f"{key}_hi"] - d[key]).clip(lower=0).fillna(0)
    colors = ["#e0a800" if s == "simulated" else "#3a7bd5" for s in d["source"]]
    ax.barh(list(y), d[key], xerr=[lo, hi], color=colors, capsize=3)
    ax.set_yticks(list(y), list(d["cell_id"]))
    ax.invert_yaxis()
    ax.set_xlabel(key)
    if (d["source"] == "simulated").any():
        ax.set_title("yellow: SIMULATED GPU, not a measurement", fontsize=9)
    path = save(fig, out_dir, "cell_energy")
    return Plot(
        "cell_energy",
        title,
        path,
        caption=f"{key} of each complete cell, with its 95% interval (error bars).",
    )


def short_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """study.json's fields as the page lists them: long lists and mappings left out."""
    return {k: v for k, v in meta.items() if not isinstance(v, dict | list) or len(str(v)) < 200}


def status_text(statuses: pd.Series) -> str:
    """ "n status, ..." of the cells' statuses, most frequent first."""
    return ", ".join(f"{n} {s}" for s, n in statuses.value_counts().items())


def simulated_banner(n_simulated: int) -> str | None:
    """The SIMULATED banner of a study with cells that ran without a GPU; None if none did."""
    if not n_simulated:
        return None
    return (
        f"SIMULATED: {n_simulated} cells ran without a GPU; their energies come from the "
        "package's simulated GPU, not from a measurement."
    )


def unfinished_table(bad: pd.DataFrame, note: str) -> Table:
    """The cells that did not finish: cell_id, status, error."""
    cols = ["cell_id", "status", "error"]
    bad = bad.reindex(columns=cols)
    return Table("unfinished", "Cells that did not finish", bad, bad, note=note)


def build(study_dir: Path):
    """The generic study report (returns report.html.Report)."""
    from jouleprof.report.html import REPORT_HTML, Report, fresh_report_dir, guarded, render
    from jouleprof.report.tables import write_table

    meta, runs = load(study_dir)
    out = fresh_report_dir(study_dir)
    table, sentence, key = answer_table(study_dir, runs)
    plots = []
    if table is not None and key is not None:
        plots.append(guarded("cell_energy", "energy per cell", energy_plot, table.data, key, out))
    bad = runs[~runs["status"].isin(("complete", "oom"))]
    failed = unfinished_table(
        bad, "Their error in full is in cells/<cell_id>/error.txt and cell.log."
    )
    index = Table("runs", "Every cell (runs.csv)", runs, runs.astype(object).fillna(""), note="")
    tables = [write_table(t, out) for t in (table, failed, index) if t is not None]
    sim = [c for c in runs["run_dir"].astype(str) if _is_simulated(study_dir / c)]
    report = Report("study", study_dir, plots=plots, tables=tables, sentences=[sentence])
    report.html = render(
        "matrix_study.html",
        study_dir / REPORT_HTML,
        name=study_dir.name,
        meta=short_meta(meta),
        sentence=sentence,
        status_counts=status_text(runs["status"]),
        simulated=simulated_banner(len(sim)),
        tables={t.name: t for t in tables},
        plots={p.name: p for p in plots},
    )
    return report
