"""`jouleprof report DIR`: regenerate every figure and table of a run or a study directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import counted, err_console, fail, note


def report_cmd(
    directory: Annotated[
        Path, typer.Argument(help="A run directory (run.json) or a study directory (runs.csv).")
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print what was written as JSON (paths, reasons).")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(help="Also write the report (one self-contained HTML file) here."),
    ] = None,
) -> None:
    """Write DIR/report.html and the figures (PNG) and tables (CSV, markdown) under DIR/report/.

    Works offline from the recorded files alone (no GPU). A figure or value that could not be
    obtained is shown as unavailable with its reason, never as 0.
    """
    from jouleprof.errors import JouleprofError
    from jouleprof.report import build_report, detect

    try:
        kind = detect(directory)
        if json_out:
            report = build_report(directory)
        else:
            with err_console.status(f"writing the {kind} report of {directory}…"):
                report = build_report(directory)
    except JouleprofError as e:
        fail(str(e))
    if html is not None and report.html is not None:
        import shutil

        if html.is_dir():
            fail(f"--html {html} is a directory: give a file name, e.g. {html / 'report.html'}")
        try:
            shutil.copyfile(report.html, html)  # figures are embedded: the one file stands alone
        except OSError as e:
            fail(f"cannot write {html}: {e.strerror or e}")
        report.html = html
    if json_out:
        print(json.dumps(report.to_json(), indent=2))
        return
    drawn = [p for p in report.plots if p.path is not None]
    note(
        f"{counted(len(drawn), 'figure')} and {counted(len(report.tables), 'table')} in "
        f"{directory / 'report'}"
    )
    for p in report.plots:
        if p.path is None:
            note(f"figure '{p.title}' unavailable: {p.reason}")
    for s in report.sentences:
        err_console.print(s, highlight=False)
    print(report.html)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
