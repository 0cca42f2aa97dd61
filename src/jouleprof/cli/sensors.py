"""`jouleprof sensors`: what this machine can measure, how often it updates, what is missing."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import out_console


def sensors_cmd(
    probe_s: Annotated[
        float, typer.Option(help="Seconds of fast reads used to detect each refresh period.")
    ] = 2.0,
    interval_ms: Annotated[float, typer.Option(help="Read interval while probing, in ms.")] = 5.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.")
    ] = False,
) -> None:
    """List every sensor signal, its detected refresh period, and what is unavailable and why."""
    from jouleprof.sensors.probe import probe_sensors

    if probe_s <= 0 or interval_ms <= 0:
        raise typer.BadParameter("--probe-s and --interval-ms must be > 0")
    report = probe_sensors(probe_s=probe_s, interval_s=interval_ms / 1000.0)
    if json_out:
        import json

        print(json.dumps(report, indent=2))
        return
    from rich.table import Table

    t = Table(title="jouleprof sensors")
    for col in ("device", "signal", "available", "refresh (detected)", "note"):
        t.add_column(col)
    for row in report["signals"]:
        period = row.get("refresh_period_s")
        t.add_row(
            row["device"],
            row["signal"],
            "[green]yes[/]" if row["available"] else "[red]no[/]",
            f"{period * 1e3:.1f} ms" if period else "—",
            escape(row.get("note") or ""),
        )
    out_console.print(t)
    for n in report["notes"]:
        out_console.print(f"[yellow]•[/] {escape(n)}")


def register(app: typer.Typer) -> None:
    app.command("sensors")(sensors_cmd)
