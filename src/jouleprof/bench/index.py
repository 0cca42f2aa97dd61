"""runs.csv: the index of a sweep directory, built from its cells' run.json files (pure)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

INDEX_CSV = "runs.csv"
CELLS_DIR = "cells"
# Summary figures copied into the index (values only; run.json keeps source and bounds).
INDEX_FIGURES = (
    "throughput_samples_per_s",
    "step_time_s",
    "energy_per_sample_j",
    "energy_per_1000_samples_kwh",
    "segment_gpu_energy_j",
    "segment_gpu_power_w",
    "mfu_pct",
    "floor_energy_per_sample_j",
    "peak_mem_allocated_bytes",
    "fine_overhead_pct",
    "crosscheck_energy_per_sample_j",
    "data_wait_pct",
    "recorder_host_pct",
)


def cell_status(cell_dir: Path) -> tuple[str, str]:
    """(status, error) of a cell directory: complete, failed, oom, incomplete or missing."""
    rj = cell_dir / "run.json"
    err = cell_dir / "error.txt"
    if not rj.is_file():
        if err.is_file():
            return "failed", err.read_text().splitlines()[0]
        return ("incomplete" if cell_dir.exists() else "missing"), ""
    try:
        d = json.loads(rj.read_text())
    except json.JSONDecodeError:
        return "incomplete", "run.json unreadable"
    if err.is_file():  # the cell process died with an error (run.json may be half-done)
        return "failed", err.read_text().splitlines()[0]
    if d.get("extra", {}).get("oom"):
        return "oom", next((n for n in d.get("notes", []) if "out of memory" in n), "out of memory")
    status = d.get("status")
    if status == "complete":
        return "complete", ""
    if status == "failed":
        return "failed", "; ".join(d.get("notes", [])[-1:])
    return "incomplete", "the cell did not finish (crash or interruption)"


def cell_row(study_dir: Path, cell: dict[str, Any]) -> dict[str, Any]:
    cdir = study_dir / CELLS_DIR / cell["cell_id"]
    status, error = cell.get("status_override") or cell_status(cdir)
    row: dict[str, Any] = {
        "cell_id": cell["cell_id"],
        "batch_size": cell["batch_size"],
        "mode": cell["mode"],
        "rep": cell["rep"],
        "status": status,
        "error": error or cell.get("error", ""),
        "run_dir": os.path.relpath(cdir, study_dir),
    }
    summary: dict[str, Any] = {}
    if (cdir / "run.json").is_file():
        try:
            summary = json.loads((cdir / "run.json").read_text()).get("summary", {})
        except json.JSONDecodeError:
            summary = {}
    for k in INDEX_FIGURES:
        row[k] = (summary.get(k) or {}).get("value")
    return row


def write_index(study_dir: Path, cells: list[dict[str, Any]]) -> Path:
    """Rebuild runs.csv from the cells' directories (atomically)."""
    import pandas as pd

    rows = [cell_row(study_dir, c) for c in cells]
    df = pd.DataFrame(rows)
    out = study_dir / INDEX_CSV
    tmp = out.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, out)
    return out
