"""`jouleprof collect DIR`: rebuild a study's index (runs.csv, runs.parquet) from run.json files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import counted, err_console, fail, note
from jouleprof.extras import advice


def collect_cmd(
    directory: Annotated[
        Path, typer.Argument(help="A study directory, or any folder holding run directories.")
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print every run's status and error as JSON.")
    ] = False,
    parquet: Annotated[bool, typer.Option(help="Also write runs.parquet (needs pyarrow).")] = True,
) -> None:
    """Index every run directory under DIR into DIR/runs.csv (and runs.parquet).

    Incomplete, crashed (status running, writer gone) and corrupt run directories are indexed
    too, with their reason, and listed; nothing is changed inside a run directory.
    """
    from jouleprof.bench.index import OK_STATUSES, collect

    if not directory.is_dir():
        fail(f"{directory} is not a directory: give a study directory or a folder of runs")
    try:
        index, rows = collect(directory, parquet=parquet)
    except OSError as e:
        fail(f"cannot write the index in {directory}: {e.strerror or e}")
    if json_out:
        keep = ("cell_id", "status", "error", "run_dir")
        print(json.dumps([{k: r.get(k) for k in keep} for r in rows], indent=2, default=str))
        return
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: -x[1]))
    note(f"{counted(len(rows), 'run')} indexed in {index}" + (f" ({summary})" if rows else ""))
    if (directory / "runs.parquet").is_file() and parquet:
        note(f"also {directory / 'runs.parquet'}")
    elif parquet:
        note(f"no runs.parquet: pyarrow is not installed ({advice('pyarrow')})")
    bad = [r for r in rows if r["status"] not in OK_STATUSES]
    if bad:
        from rich.table import Table

        t = Table(title="runs that did not finish", title_justify="left")
        for c in ("run", "status", "why"):
            t.add_column(c, overflow="fold")
        for r in bad:
            t.add_row(*(escape(str(v)) for v in (r["run_dir"], r["status"], r.get("error") or "")))
        err_console.print(t)
    if not rows:
        note(f"no run directory (run.json or cell.json) under {directory}")


def register(app: typer.Typer) -> None:
    app.command("collect")(collect_cmd)
