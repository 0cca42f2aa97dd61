"""`jouleprof probe video`: which model × method × precision cells train, and at what cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import err_console, fail, note, refuse_file_out
from jouleprof.interrupts import exit_code_of

probe_app = typer.Typer(
    help="Feasibility probes: every cell its own process; rows land in DIR/probe.csv.",
    no_args_is_help=True,
)


def _names(text: str | None, flag: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    if not out:
        raise typer.BadParameter(f"{flag} is empty")
    return out


def _onoff(text: str) -> tuple[bool, ...]:
    vals = []
    for x in (t.strip().lower() for t in text.split(",") if t.strip()):
        if x not in ("on", "off"):
            raise typer.BadParameter(f"--checkpointing takes on and/or off, got {x!r}")
        vals.append(x == "on")
    if not vals:
        raise typer.BadParameter("--checkpointing is empty")
    return tuple(dict.fromkeys(vals))


@probe_app.command("video")
def probe_video(
    out: Annotated[Path, typer.Option(help="Probe directory (rerun the same command to resume).")],
    models: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated: videomae-b,timesformer-b,swin3d-b,hiera-b (default all)."
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(help="Comma-separated: full,lora,qlora,adalora,bitfit (default all)."),
    ] = None,
    precisions: Annotated[
        str | None, typer.Option(help="Comma-separated: fp32,fp16,bf16,int8 (default all).")
    ] = None,
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,4",
    checkpointing: Annotated[
        str, typer.Option(help="Activation checkpointing settings: off, on or off,on.")
    ] = "off",
    checkpointing_methods: Annotated[
        str | None,
        typer.Option(help="Only these methods get the checkpointing-on cells (default: all)."),
    ] = None,
    timed_s: Annotated[float, typer.Option(help="Seconds of timed steps per cell.")] = 5.0,
    warmup_steps: Annotated[int, typer.Option(help="Untimed steps before the timed ones.")] = 3,
    num_classes: Annotated[int, typer.Option(help="Classes of the classifier head.")] = 20,
    tiny: Annotated[
        bool, typer.Option(help="Tiny configs of each model (CPU smoke test).")
    ] = False,
    cells_per_process: Annotated[
        int,
        typer.Option(
            help="Cells per worker process (1: each its own; more saves start-up time, a crash "
            "still ends only its own cell).",
            min=1,
        ),
    ] = 1,
    cell_timeout_s: Annotated[float, typer.Option(help="Kill a cell after this long.")] = 600.0,
    share_builds: Annotated[
        bool,
        typer.Option(
            help="With --cells-per-process > 1: cells that differ only in batch size train one "
            "built model back to back (each with its own warm-up, window and memory reset)."
        ),
    ] = True,
    budget_s: Annotated[
        float | None, typer.Option(help="Start no new cell after this long (rerun to resume).")
    ] = None,
    retry_errors: Annotated[bool, typer.Option(help="Run rows with status error again.")] = False,
    preload: Annotated[
        bool,
        typer.Option(
            help="Fork each worker from one process that imported torch, transformers and peft "
            "once (each worker is still its own process)."
        ),
    ] = True,
) -> None:
    """Train one step (plus warm-up and timed steps) of every cell; write DIR/probe.csv."""
    from jouleprof.extras import VIDEO_MODULES, require

    require("jouleprof probe video", *VIDEO_MODULES, extra="video")
    from jouleprof.bench.probe import PROBE_CSV, ProbeSpec, plan, run_probe

    try:
        kw = {
            k: v
            for k, v in {
                "models": _names(models, "--models"),
                "methods": _names(methods, "--methods"),
                "precisions": _names(precisions, "--precisions"),
            }.items()
            if v is not None
        }
        try:
            bs = tuple(int(x) for x in batch_sizes.split(",") if x.strip())
        except ValueError:
            raise typer.BadParameter(f"--batch-sizes takes integers, got {batch_sizes!r}") from None
        spec = ProbeSpec(
            **kw,
            batch_sizes=bs,
            checkpointing=_onoff(checkpointing),
            checkpointing_methods=_names(checkpointing_methods, "--checkpointing-methods"),
            timed_s=timed_s,
            warmup_steps=warmup_steps,
            num_classes=num_classes,
            tiny=tiny,
            cells_per_process=cells_per_process,
            cell_timeout_s=cell_timeout_s,
            share_builds=share_builds,
        )
    except ValueError as e:
        fail(str(e))
    refuse_file_out(out)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = len(plan(spec))
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    ) as bar:
        task = bar.add_task("cells", total=total)

        def on_row(row):
            ck = "ckpt" if row["checkpointing"] else ""
            extra = (
                f"  {row.get('error')}"
                if row["status"] != "ok"
                else (
                    f"  {row['s_per_step']:.3f} s/step"
                    + (
                        f", {row['j_per_step']:.1f} J/step"
                        if row.get("j_per_step") is not None
                        else ""
                    )
                    + (
                        f", {row['peak_mem_mib']:.0f} MiB"
                        if row.get("peak_mem_mib") is not None
                        else ""
                    )
                )
            )
            bar.console.print(
                f"{row['model']:>13s} {row['method']:>7s} {row['precision']:>4s} {ck:>4s} "
                f"b{row['batch']:<3d} {row['status']}{extra}",
                highlight=False,
                markup=False,  # an error's text may hold brackets (pip install 'x[quant]')
            )
            bar.advance(task)

        try:
            counts = run_probe(
                spec,
                out,
                budget_s=budget_s,
                retry_errors=retry_errors,
                on_row=on_row,
                preload=preload,
            )
        except KeyboardInterrupt as e:
            note(f"interrupted: rerun the same command to resume ({out})")
            raise typer.Exit(exit_code_of(e)) from None
        bar.update(task, completed=total - counts["left"])
    note(
        f"{counts['ran']} cell(s) run, {counts['refused']} refused, {counts['skipped']} already "
        f"in {PROBE_CSV}, {counts['left']} left"
        + (" (budget spent: rerun to resume)" if counts["left"] else "")
    )
    note(f"probe table: {out / PROBE_CSV}")


def register(app: typer.Typer) -> None:
    app.add_typer(probe_app, name="probe")
