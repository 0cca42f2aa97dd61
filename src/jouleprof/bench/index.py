"""runs.csv: the index of a study directory, built from its cells' run.json files (pure reads).

One row per cell: cell_id, the cell's factors, status, error, run_dir, then the value of every
summary figure its run.json holds (the figures of INDEX_FIGURES first, in that order; run.json
keeps each figure's source and bounds).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

INDEX_CSV = "runs.csv"
INDEX_PARQUET = "runs.parquet"
CELLS_DIR = "cells"
# Summary figures put first in the index, in this order.
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
_FIXED = ("cell_id", "status", "error", "run_dir")


def _first_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "error.txt unreadable"
    return next((ln for ln in lines if ln.strip()), "error.txt is empty")


def read_run_json(run_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """(run.json as a dict, "") or (None, why it could not be read)."""
    p = run_dir / "run.json"
    if not p.is_file():
        return None, "no run.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"run.json unreadable ({type(e).__name__}: {e})"
    if not isinstance(d, dict):
        return None, "run.json is not a JSON object"
    return d, ""


def cell_status(cell_dir: Path) -> tuple[str, str]:
    """(status, error) of a cell directory: complete, failed, oom, incomplete or missing."""
    err = cell_dir / "error.txt"
    if not (cell_dir / "run.json").is_file():
        if err.is_file():
            return "failed", _first_line(err)
        return ("incomplete" if cell_dir.exists() else "missing"), ""
    d, why = read_run_json(cell_dir)
    if d is None:
        return "incomplete", why
    if err.is_file():  # the cell process died with an error (run.json may be half-done)
        return "failed", _first_line(err)
    notes = [n for n in d.get("notes", []) if isinstance(n, str)]
    if d.get("status") == "oom" or (d.get("extra") or {}).get("oom"):
        return "oom", next((n for n in notes if "out of memory" in n), "out of memory")
    status = d.get("status")
    if status == "complete":
        return "complete", ""
    if status == "failed":
        return "failed", "; ".join(notes[-1:]) or "run.json says failed"
    return "incomplete", "the cell did not finish (crash or interruption)"


def _last_attempt(cdir: Path) -> dict[str, Any]:
    try:
        attempts = json.loads((cdir / "cell.json").read_text()).get("attempts") or [{}]
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}
    return attempts[-1] if isinstance(attempts[-1], dict) else {}


def figure_values(run: Mapping[str, Any] | None) -> dict[str, Any]:
    """{figure name: value} of a run.json's summary (None where a figure has no value)."""
    out: dict[str, Any] = {}
    summary = (run or {}).get("summary") or {}
    if not isinstance(summary, dict):
        return out
    for k, f in summary.items():
        out[k] = f.get("value") if isinstance(f, dict) else None
    return out


def cell_row(
    study_dir: Path,
    cell_id: str,
    factors: Mapping[str, Any],
    override: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """One runs.csv row: the cell's id, factors, status, error and figure values."""
    cdir = study_dir / CELLS_DIR / cell_id
    return _row(cell_id, factors, cdir, study_dir, *(override or cell_status(cdir)))


def _row(
    cell_id: str, factors: Mapping[str, Any], cdir: Path, root: Path, status: str, error: str
) -> dict[str, Any]:
    """The row of the run directory `cdir`: id, factors, status, error (for an incomplete run
    without one: why its last attempt ended, killed or cancelled), its path relative to `root`,
    then its figures' values (INDEX_FIGURES first)."""
    if not error and status == "incomplete":
        error = _last_attempt(cdir).get("error", "")
    row: dict[str, Any] = {"cell_id": cell_id}
    row.update({k: v for k, v in factors.items() if k not in _FIXED})
    row.update(status=status, error=error, run_dir=os.path.relpath(cdir, root))
    run, _ = read_run_json(cdir)
    values = figure_values(run)
    for k in INDEX_FIGURES:
        row[k] = values.pop(k, None)
    row.update({k: v for k, v in values.items() if k not in row})
    return row


def _column_order(df, factors: Sequence[str]) -> list[str]:
    """cell_id, the factors, status, error, run_dir, then the figures any cell has a value for
    (INDEX_FIGURES first)."""
    fixed = [c for c in _FIXED[1:] if c in df.columns]
    factors = [c for c in factors if c in df.columns and c not in _FIXED]
    taken = {"cell_id", *factors, *fixed}
    figures = [c for c in df.columns if c not in taken and df[c].notna().any()]
    return ["cell_id", *factors, *fixed, *figures]


def write_table(
    study_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    factors: Sequence[str] = (),
    parquet: bool = False,
) -> Path:
    """Write rows as runs.csv (atomically) and, with `parquet`, runs.parquet; returns runs.csv.
    `factors`: the factor columns, put right after cell_id."""
    import pandas as pd

    df = pd.DataFrame(list(rows))
    df = df[_column_order(df, factors)] if len(df) else df
    out = study_dir / INDEX_CSV
    tmp = out.with_name(f".{INDEX_CSV}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, out)
    if parquet:
        pq = study_dir / INDEX_PARQUET
        ptmp = pq.with_name(f".{INDEX_PARQUET}.tmp")
        # Mixed columns (a factor that is a number in one cell, text in another) as text.
        for c in df.columns:
            if df[c].dtype == object:
                df[c] = df[c].map(lambda v: v if v is None or isinstance(v, str) else str(v))
        df.to_parquet(ptmp, index=False)
        os.replace(ptmp, pq)
    return out


def write_index(
    study_dir: Path,
    cells: Sequence[tuple[str, Mapping[str, Any]]],
    overrides: Mapping[str, tuple[str, str]] | None = None,
) -> Path:
    """Rebuild runs.csv from the cells' directories: `cells` as (cell_id, factors) pairs,
    `overrides` cell_id -> (status, error) for cells a rule skipped."""
    overrides = overrides or {}
    rows = [cell_row(study_dir, cid, f, overrides.get(cid)) for cid, f in cells]
    return write_table(study_dir, rows, factor_names(f for _, f in cells))


def factor_names(factor_dicts) -> list[str]:
    """The union of the cells' factor names, in first-seen order."""
    return list(dict.fromkeys(k for f in factor_dicts for k in f))


# -- collect: the index from whatever run directories a folder holds --------------------------

OK_STATUSES = ("complete", "oom")


def find_run_dirs(root: Path, max_depth: int = 4) -> list[Path]:
    """The run directories under `root`: every cells/<id>/ of a study, and every other
    directory holding a run.json (or a cell.json), at most `max_depth` levels down."""
    found: list[Path] = []
    cells = root / CELLS_DIR
    if cells.is_dir():
        found += sorted(p for p in cells.iterdir() if p.is_dir())
    skip = {cells, root / "attempts", root / "report", root / "slurm"}

    def walk(d: Path, depth: int) -> None:
        if depth > max_depth or d in skip:
            return
        try:
            subs = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for p in subs:
            if p in skip:
                continue
            if (p / "run.json").exists() or (p / "cell.json").exists():
                found.append(p)
            else:
                walk(p, depth + 1)

    walk(root, 1)
    return found


def run_state(run_dir: Path) -> tuple[str, str]:
    """(status, reason) of any run directory: cell_status, with a run recorded as running told
    apart as still running or crashed (its writer gone), and an unreadable run.json corrupt."""
    status, why = cell_status(run_dir)
    run, err = read_run_json(run_dir)
    if (run_dir / "run.json").is_file() and run is None:
        return "corrupt", err
    if run is not None and run.get("status") == "running" and status == "incomplete":
        try:
            from jouleprof.store.liveness import effective_status

            state = effective_status(run_dir)
            return state.status, state.reason or "still being written"
        except Exception as e:  # a record this version cannot read: say so
            return "corrupt", f"run.json not readable as a run record ({e})"
    return status, why


def collect_rows(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per run directory under `root` (see find_run_dirs) and the factor names;
    rows of an existing runs.csv whose cell has no directory (a skip rule's) are kept."""
    rows, factors = [], []
    seen = set()
    for d in find_run_dirs(root):
        try:
            cell = json.loads((d / "cell.json").read_text()) if (d / "cell.json").is_file() else {}
        except (OSError, json.JSONDecodeError):
            cell = {}
        f = cell.get("factors") if isinstance(cell.get("factors"), dict) else {}
        cid = cell.get("cell_id") or os.path.relpath(d, root)
        row = _row(cid, f, d, root, *run_state(d))
        rows.append(row)
        factors += [k for k in f if k not in factors]
        seen.add(row["run_dir"])
    old = root / INDEX_CSV
    if old.is_file():
        import pandas as pd

        try:
            prev = pd.read_csv(old, dtype=str, keep_default_na=False)
        except Exception:  # an unreadable old index is replaced, not merged
            prev = None
        if prev is not None and "run_dir" in prev.columns:
            for r in prev.to_dict("records"):
                if r["run_dir"] not in seen and not (root / r["run_dir"]).exists():
                    rows.append({k: (v if v != "" else None) for k, v in r.items()})
    return rows, factors


def collect(root: Path, parquet: bool = True) -> tuple[Path, list[dict[str, Any]]]:
    """Rebuild runs.csv (and runs.parquet where pyarrow is installed) from every run directory
    under `root`; returns the index path and the rows."""
    rows, factors = collect_rows(root)
    if parquet:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            parquet = False
    return write_table(root, rows, factors, parquet=parquet), rows
