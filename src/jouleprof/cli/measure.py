"""`jouleprof measure -- CMD ARGS...`: run any command and write its run directory."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import err_console, fail, note, refuse_file_out, summary_table


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    """ "0,1" -> (0, 1); None or "all" -> None (every visible GPU); "none" -> ()."""
    if text is None or text.strip().lower() == "all":
        return None
    if text.strip().lower() == "none":
        return ()
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(
            f"--gpus {text!r} is not a list of GPU indices: use e.g. --gpus 0 or --gpus 0,1"
        ) from None
    if any(i < 0 for i in out):
        raise typer.BadParameter(f"--gpus takes GPU indices ≥ 0, got {text!r}")
    return out


def _run_child(cmd: list[str], m) -> int:
    """Run the command; Ctrl-C reaches it (same process group), and we wait for it to end.
    A SIGTERM sent to jouleprof alone (`timeout`, `kill PID`) is passed on to the command."""
    from jouleprof.interrupts import Terminated

    proc = subprocess.Popen(cmd)
    m.record.extra["pid"] = proc.pid
    try:
        return _exit_code(proc.wait())
    except KeyboardInterrupt as e:
        # The terminal sent SIGINT to the child too; give it a moment to exit cleanly.
        try:
            proc.send_signal(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        m.record.extra["exit_code"] = _exit_code(proc.returncode)
        raise


def _exit_code(returncode: int) -> int:
    """A child killed by signal N exits as the shell reports it: 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


def measure_cmd(
    cmd: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command to run, after --.", metavar="-- COMMAND ARGS", show_default=False
        ),
    ] = None,
    gpus: Annotated[
        str | None, typer.Option(help="GPU indices to measure, e.g. 0,1 (default: all visible).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory to create.")] = None,
    interval_ms: Annotated[float, typer.Option(help="Sensor read interval in ms.")] = 20.0,
    counter_interval_ms: Annotated[
        float,
        typer.Option(
            help="Mean interval between energy-counter reads in the run's middle, ms (each "
            "costs ~5 ms CPU; the start and end are read every refresh)."
        ),
    ] = 5000.0,
    slow_fields_ms: Annotated[
        float,
        typer.Option(
            help="Interval between reads of the GPUs' slow fields (1 s average power, "
            "utilization, memory, clock, temperature), ms; the instant power is read every "
            "--interval-ms. Each set took ~0.6 ms of the sampler's CPU on an H200 host."
        ),
    ] = 500.0,
    idle_s: Annotated[
        float, typer.Option(help="Seconds of idle baseline before the command (0: none).")
    ] = 1.0,
    power_buffer: Annotated[
        bool,
        typer.Option(
            help="Also copy NVML's ~20 ms power-sample buffer to power_buffer.csv (read once a "
            "second, 0.35 ms of CPU a read). Record it when you mark phases in your loop: "
            "`jouleprof attribute` then uses it as regression rows."
        ),
    ] = False,
    rapl: Annotated[bool, typer.Option(help="Read CPU energy through RAPL if readable.")] = True,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the summary as JSON on stdout, after the command's own output.",
        ),
    ] = False,
    simulate_gpu_w: Annotated[
        float | None,
        typer.Option(help="Testing aid: also measure a simulated GPU 'sim0' drawing this many W."),
    ] = None,
) -> None:
    """Run CMD and write a run directory: time, exit code, GPU energy, power, memory."""
    from jouleprof.errors import JouleprofError
    from jouleprof.measurement import MeasureConfig, measure

    if not cmd:
        fail("no command given: use `jouleprof measure -- python train.py`")
    if interval_ms <= 0:
        fail(f"--interval-ms must be > 0, got {interval_ms}")
    if idle_s < 0:
        fail(f"--idle-s must be ≥ 0, got {idle_s}")
    if counter_interval_ms <= 0:
        fail(f"--counter-interval-ms must be > 0, got {counter_interval_ms}")
    if not 0 < slow_fields_ms < float("inf"):
        fail(
            f"--slow-fields-ms must be > 0 (e.g. 500, or 100 for phase work), got {slow_fields_ms}"
        )
    if shutil.which(cmd[0]) is None:
        fail(f"command not found: {cmd[0]!r} (not a file and not on PATH)", code=127)
    refuse_file_out(out)
    if simulate_gpu_w is not None and simulate_gpu_w < 0:
        fail(f"--simulate-gpu-w must be ≥ 0, got {simulate_gpu_w}")
    cfg = MeasureConfig(
        gpus=parse_gpus(gpus),
        interval_s=interval_ms / 1000.0,
        counter_interval_s=counter_interval_ms / 1000.0,
        slow_fields_period_s=slow_fields_ms / 1000.0,
        idle_s=idle_s,
        rapl=rapl,
        simulate_gpu_w=simulate_gpu_w,
        power_buffer=power_buffer,
    )
    code = 0
    interrupted = False
    m = None
    try:
        with measure(out, cfg, run_config={"command": cmd}) as m:
            for n in m.unavailable_notes:
                note(n)
            code = _run_child(cmd, m)
            m.record.extra["exit_code"] = code
    except KeyboardInterrupt as e:
        from jouleprof.interrupts import exit_code_of

        interrupted = True
        code = exit_code_of(e)
    except JouleprofError as e:
        fail(str(e))
    if m is None:  # Ctrl-C before the measurement had begun: nothing was run or measured
        note("interrupted before the command started: nothing was measured")
        raise typer.Exit(code)
    if json_out:
        import json

        print(json.dumps({k: f.to_json() for k, f in m.record.summary.items()}, indent=2))
    else:
        err_console.print(
            summary_table(m.record.summary, f"{m.record.run_id} ({m.record.status.value})")
        )
    note(f"run directory: {m.run_dir.path}")
    if interrupted:
        note("interrupted: the run directory holds everything recorded until then")
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command(
        "measure",
        context_settings={"allow_interspersed_args": False},
    )(measure_cmd)
