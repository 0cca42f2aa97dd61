"""`jouleprof compare RUN_A RUN_B ...`: runs side by side, differences beyond uncertainty marked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import counted, fail, note


def compare_cmd(
    runs: Annotated[
        list[Path], typer.Argument(help="Two or more run directories; the first is the reference.")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    html: Annotated[
        Path | None, typer.Option(help="Also write the comparison as an HTML page here.")
    ] = None,
    all_figures: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Terminal: show every figure, not only those that differ or the main ones.",
        ),
    ] = False,
) -> None:
    """Compare every summary figure and phase energy of RUNS against the first.

    A difference larger than its uncertainty (both 95% intervals, in quadrature) is marked *.
    """
    from jouleprof.errors import JouleprofError
    from jouleprof.report.compare import compare_runs, write_compare_html

    try:
        cmp = compare_runs(list(runs))
    except (JouleprofError, ValueError) as e:
        fail(str(e))
    if html is not None:
        if html.is_dir():
            fail(f"--html {html} is a directory: give a file name, e.g. {html / 'compare.html'}")
        try:
            write_compare_html(cmp, html)
        except OSError as e:
            fail(f"cannot write {html}: {e.strerror or e}")
    if json_out:
        print(json.dumps(cmp.to_json(), indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    main = ("energy_j", "energy_per_sample_j", "throughput_samples_per_s", "step_time_s", "power_w")
    t = Table(
        title=f"against {cmp.names[0]} (* : larger than its uncertainty)", title_justify="left"
    )
    t.add_column("figure", overflow="fold")
    for i, n in enumerate(cmp.names):
        sim = any(r.values[i].source == "simulated" for r in cmp.phases + cmp.figures)
        t.add_column(n + (" [magenta](phases SIMULATED)[/]" if sim else ""), overflow="fold")
        if i:
            t.add_column(f"Δ {n}", overflow="fold")
    shown = 0
    for r in cmp.phases + cmp.figures:
        if (
            not all_figures
            and not any(d.significant for d in r.diffs)
            and not r.key.endswith(main)
            and ":" not in r.key
        ):
            continue
        cells = []
        for i, v in enumerate(r.values):
            cells.append(v.text(r.unit, reason=False))
            if i:
                d = r.diffs[i - 1]
                cells.append(f"[bold yellow]{d.text()}[/]" if d.significant else d.text())
        t.add_row(r.key, *cells)
        shown += 1
    Console().print(t)
    for p in cmp.problems:
        note(p)
    hidden = len(cmp.phases) + len(cmp.figures) - shown
    if hidden:
        note(f"{counted(hidden, 'more figure')} without a marked difference: --all shows them")
    if html is not None:
        note(f"HTML: {html}")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
