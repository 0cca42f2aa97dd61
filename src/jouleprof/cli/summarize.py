"""`jouleprof summarize STUDY`: markdown and CSV tables of a study (video studies)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, note, out_console


def summarize_cmd(
    study: Annotated[Path, typer.Argument(help="A study directory (`jouleprof study video`).")],
    print_md: Annotated[bool, typer.Option("--print", help="Print the markdown.")] = False,
) -> None:
    """Best configuration per model by NS#, with ties inside the measurement's uncertainty."""
    import json

    from jouleprof.report.video_summary import write_summary

    spec_path = study / "study.json"
    if not spec_path.is_file():
        fail(f"{study} has no study.json: give a study directory")
    try:
        kind = json.loads(spec_path.read_text()).get("study")
    except ValueError as e:
        fail(f"{spec_path} is not valid JSON: {e}")
    if kind != "video":
        fail(f"{study} is a {kind or 'non-video'} study: summarize writes video study tables")
    try:
        md, csv_path = write_summary(study)
    except (ValueError, OSError) as e:
        fail(str(e))
    if print_md:
        out_console.print(md.read_text(), markup=False, highlight=False)
    note(f"{md}\n{csv_path}")


def register(app: typer.Typer) -> None:
    app.command("summarize")(summarize_cmd)
