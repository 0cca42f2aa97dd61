"""`jouleprof summarize DIR`: markdown and CSV tables of a video study (best configuration by
NS#) or of a video probe (what each PEFT method saves against full fine-tuning)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, note


def summarize_cmd(
    study: Annotated[
        Path,
        typer.Argument(
            help="A study directory (`jouleprof study video`) or a probe directory "
            "(`jouleprof probe video`)."
        ),
    ],
    print_md: Annotated[bool, typer.Option("--print", help="Print the markdown.")] = False,
    repeat: Annotated[
        Path | None,
        typer.Option(
            help="Probe only: another probe.csv that measured some of the same cells again "
            "(in other processes); the savings then get intervals that hold that spread."
        ),
    ] = None,
) -> None:
    """A video study: the best configuration per model by NS#, with ties inside the
    measurement's uncertainty. A probe: each method's memory, s/step and J/step against full
    fine-tuning at the same precision, batch and checkpointing."""
    import json

    from jouleprof.report.video_summary import write_summary

    spec_path = study / "study.json"
    if not spec_path.is_file() and (study / "probe.csv").is_file():
        _probe(study, repeat, print_md)
        return
    if repeat is not None:
        fail("--repeat is for a probe directory (one holding probe.csv)")
    if not spec_path.is_file():
        fail(f"{study} has no study.json or probe.csv: give a study or a probe directory")
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
        _print_markdown(md.read_text())
    note(f"{md}\n{csv_path}")


def _probe(probe_dir: Path, repeat: Path | None, print_md: bool) -> None:
    from jouleprof.report.probe_savings import write

    out = probe_dir / "probe_savings"
    try:
        md = write(probe_dir / "probe.csv", out, repeat)
    except (ValueError, KeyError, OSError) as e:
        fail(f"{probe_dir}: {e}")
    if print_md:
        _print_markdown(md)
    note(f"{out.with_suffix('.md')}\n{out.with_suffix('.csv')}")


def _print_markdown(md: str) -> None:
    """The markdown as written, line for line: a terminal's width must not wrap a table row
    (rich's console wrapped the header inside a cell at 80 columns, breaking the table)."""
    typer.echo(md, nl=not md.endswith("\n"))


def register(app: typer.Typer) -> None:
    app.command("summarize")(summarize_cmd)
