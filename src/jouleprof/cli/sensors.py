"""`jouleprof sensors`: what this machine can measure, how often it updates, what is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import fail, note, out_console


def sensors_cmd(
    probe_s: Annotated[
        float, typer.Option(help="Seconds of fast reads used to detect each refresh period.")
    ] = 2.0,
    interval_ms: Annotated[float, typer.Option(help="Read interval while probing, in ms.")] = 5.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.")
    ] = False,
    lag_out: Annotated[
        Path | None,
        typer.Option(
            help="Instead: measure the power buffer's lag with a loop of varied steps (a GPU "
            "and torch needed) and write it to this sensor file, for jouleprof attribute "
            "--sensor on runs whose steps are all alike.",
            show_default=False,
        ),
    ] = None,
    lag_s: Annotated[
        float, typer.Option(help="Seconds of the lag loop (with --lag-out; >= 10).")
    ] = 30.0,
    gpu: Annotated[int, typer.Option(help="GPU index for --lag-out.")] = 0,
    run_dir: Annotated[
        Path | None, typer.Option(help="Keep the lag loop's run directory here (--lag-out).")
    ] = None,
) -> None:
    """List every sensor signal, its detected refresh period, and what is unavailable and why
    (or, with --lag-out, measure the power buffer's lag)."""
    if lag_out is not None:
        _measure_lag(lag_out, lag_s, gpu, run_dir)
        return
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


def _measure_lag(out: Path, seconds: float, gpu: int, run_dir: Path | None) -> None:
    """Run the lag loop (`bench.sensor_lag`), attribute it, and write the sensor file."""
    import tempfile

    from jouleprof.bench.sensor_lag import MIN_SECONDS, run_lag_loop

    if seconds < MIN_SECONDS:
        fail(f"--lag-s {seconds:g} is too short to pin the lag: give at least {MIN_SECONDS:g} "
             "(30 is usual)")  # fmt: skip
    if run_dir is not None and run_dir.exists():
        fail(f"{run_dir} exists: give a new directory for --run-dir (nothing is overwritten)")
    try:
        import torch
    except ImportError:
        fail("--lag-out runs a loop on a GPU: install torch with CUDA (pip install "
             "'jouleprof[torch]')")  # fmt: skip
    if not torch.cuda.is_available():
        fail("--lag-out measures a GPU's power buffer, and torch sees no CUDA GPU here")
    from jouleprof.attribution.api import attribute
    from jouleprof.attribution.sensor_file import SensorFileError, fit_of_run, write_sensor
    from jouleprof.errors import JouleprofError

    where = run_dir or Path(tempfile.mkdtemp(prefix="jouleprof-lag-")) / "run"
    note(f"lag loop: {seconds:g} s on GPU {gpu}, varied steps, into {where}")
    try:
        rd = run_lag_loop(where, seconds, gpu)
        dev = attribute(rd, "regression", device=f"gpu{gpu}").devices[0]
        fit = fit_of_run(dev, rd)
        write_sensor(out, fit)
    except (JouleprofError, SensorFileError, ValueError) as e:
        fail(f"the lag could not be measured: {e} (run directory: {where})")
    shown = escape(str(out))
    out_console.print(
        f"{escape(fit.gpu)}: power buffer lag {1e3 * fit.buffer_lag_s:.2f} ms "
        f"(±{1e3 * fit.buffer_lag_sd_s:.2f} ms from this run, {fit.n_buffer_rows} samples); "
        f"wrote {shown}\nuse it with: jouleprof attribute RUN --sensor {shown}"
    )


def register(app: typer.Typer) -> None:
    app.command("sensors")(sensors_cmd)
