"""`jouleprof analyze DIR`: the factorial analysis of an energy-aware study directory.

Prints the ANOVA of accuracy, internal E and measured energy on architecture, dataset and λ
(with partial η² and p-values), the internal-E versus measured-joules table with its rank
correlation, and a plain verdict; writes analysis/report.md, analysis/analysis.json and the
effect plots into DIR. `--json` prints the analysis as JSON instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def analyze_cmd(
    study_dir: Annotated[
        Path, typer.Argument(help="A study directory (from `jouleprof study energy-aware`).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON.")] = False,
    plots: Annotated[bool, typer.Option(help="Write the effect plots (PNG).")] = True,
) -> None:
    """Factorial ANOVA (partial η², p), internal E vs measured joules, and a verdict."""
    from jouleprof.cli.console import counted, fail, note, out_console

    if not study_dir.is_dir():
        fail(f"{study_dir} is not a directory: give a study directory")
    if not (study_dir / "cells").is_dir():
        fail(f"{study_dir} has no cells/ folder: it is not a study directory")
    study = {}
    if (study_dir / "study.json").is_file():
        try:
            study = json.loads((study_dir / "study.json").read_text())
        except json.JSONDecodeError as e:
            fail(f"{study_dir / 'study.json'} is unreadable: {e}")
    if study and study.get("study") != "energy-aware":
        fail(
            f"{study_dir} holds a {study.get('study') or study.get('workload') or 'other'} "
            "study; `jouleprof analyze` analyzes energy-aware studies (`jouleprof report` "
            "covers the others)"
        )
    from jouleprof.analysis.energy_study import analyze_study
    from jouleprof.analysis.report_text import markdown_report

    res = analyze_study(study_dir, plots=plots)
    out = study_dir / "analysis"
    out.mkdir(exist_ok=True)
    data = res.to_json()
    (out / "analysis.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    text = markdown_report(res, study)
    (out / "report.md").write_text(text)
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    if out_console.is_terminal:
        from rich.markdown import Markdown

        out_console.print(Markdown(text))
    else:  # a pipe or a log: the markdown itself, whose tables rich would cut to 80 columns
        print(text)
    note(
        f"written: {out / 'report.md'}, {out / 'analysis.json'}"
        + (f", {counted(len(res.plots), 'plot')}" if res.plots else "")
    )


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze_cmd)
