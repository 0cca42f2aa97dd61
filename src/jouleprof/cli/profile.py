"""`jouleprof profile WORKLOAD`: train a workload under one mode and write its run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import err_console, fail, note, summary_table


def profile_cmd(
    workload: Annotated[str, typer.Argument(help="Workload to train: vjepa2.")] = "vjepa2",
    preset: Annotated[
        str, typer.Option(help="Preset: tiny, vit_base, vit_large, vit_huge.")
    ] = "tiny",
    batch_size: Annotated[
        int | None, typer.Option(help="Batch size (default: the preset's).")
    ] = None,
    mode: Annotated[str, typer.Option(help="baseline, e2e, fine, codecarbon or zeus.")] = "fine",
    steps: Annotated[
        int | None, typer.Option(help="Measured steps (instead of --duration-s).")
    ] = None,
    duration_s: Annotated[float, typer.Option(help="Seconds of measured training.")] = 30.0,
    data: Annotated[
        str, typer.Option(help="'fake' (FakeVideo), a clip folder or a CSV of paths.")
    ] = "fake",
    num_workers: Annotated[int | None, typer.Option(help="Data-loader workers.")] = None,
    overhead_pairs: Annotated[
        int, typer.Option(help="Fine mode: interleaved overhead block pairs.")
    ] = 4,
    overhead_block_steps: Annotated[
        int,
        typer.Option(
            help="Fine mode: steps per overhead block (1: instrumented and plain steps "
            "alternate one by one, so slow drifts cancel in each pair)."
        ),
    ] = 8,
    isolation_s: Annotated[
        float, typer.Option(help="Fine mode: seconds to replay each phase alone (0: skip).")
    ] = 0.0,
    isolation_repeats: Annotated[
        int,
        typer.Option(
            help="Fine mode: rounds over the isolation replays, interleaved, so the reference "
            "averages over the GPU's drift between loops.",
            min=1,
        ),
    ] = 1,
    fixed_batch: Annotated[
        bool,
        typer.Option(
            help="Train on one batch over and over (identical steps): for comparing attribution "
            "methods against isolation replays of that batch."
        ),
    ] = False,
    power_buffer: Annotated[
        bool | None,
        typer.Option(
            "--power-buffer/--no-power-buffer",
            help="Copy NVML's ~20 ms power-sample buffer to power_buffer.csv (the phase "
            "regression's densest rows). Default: in fine mode.",
            show_default=False,
        ),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(help="GPU indices to measure (default: the one the workload trains on)."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory to create.")] = None,
    activation_checkpointing: Annotated[
        bool | None, typer.Option(help="Recompute activations in backward.")
    ] = None,
    compile: Annotated[bool | None, typer.Option(help="torch.compile the networks.")] = None,
    optimizer_impl: Annotated[
        str | None, typer.Option(help="AdamW kernel: fused, foreach, default.")
    ] = None,
    grad_accum_steps: Annotated[
        int | None, typer.Option(help="Micro-batches per optimizer step.")
    ] = None,
    report: Annotated[bool, typer.Option(help="Write report.html into the run directory.")] = True,
) -> None:
    """Train WORKLOAD, measure it, attribute each phase's energy, and write a report."""
    from jouleprof.bench.train import CellConfig, run_cell
    from jouleprof.cli.measure import parse_gpus
    from jouleprof.errors import JouleprofError
    from jouleprof.measurement import DEFAULT_RUNS_DIR
    from jouleprof.store.rundir import RunDir, new_run_id

    overrides = {
        k: v
        for k, v in {
            "activation_checkpointing": activation_checkpointing,
            "compile": compile,
            "optimizer_impl": optimizer_impl,
            "grad_accum_steps": grad_accum_steps,
        }.items()
        if v is not None
    }
    fine = mode == "fine"
    try:
        cfg = CellConfig(
            workload=workload,
            preset=preset,
            batch_size=batch_size,
            mode=mode,
            duration_s=duration_s,
            steps=steps,
            data=data,
            num_workers=num_workers,
            overhead_pairs=overhead_pairs if fine else 0,
            overhead_block_steps=overhead_block_steps,
            isolation_s=isolation_s if fine else 0.0,
            isolation_repeats=isolation_repeats,
            fixed_batch=fixed_batch,
            power_buffer=power_buffer,
            gpus=parse_gpus(gpus),
            overrides=overrides,
        )
    except ValueError as e:
        fail(str(e))
    path = out or Path(DEFAULT_RUNS_DIR) / new_run_id(f"profile-{workload}")
    if path.exists() and not path.is_dir():
        fail(f"--out {path} is a file, not a directory: choose another path")
    try:
        run_cell(cfg, path)
    except (JouleprofError, ValueError) as e:
        fail(str(e))
    except KeyboardInterrupt:
        note(f"interrupted: {path} holds everything recorded until then")
        raise typer.Exit(130) from None
    rec = RunDir(path).read_record()
    err_console.print(summary_table(rec.summary, f"{rec.run_id} ({rec.status.value})"))
    for method, st in (rec.extra.get("attribution") or {}).items():
        if isinstance(st, dict) and not st.get("ok", True):
            note(f"attribution by {method} not possible: {st.get('reason')}")
    if report:
        from jouleprof.report.html import write_run_report

        p = write_run_report(path)
        note(f"report: {p}")
    note(f"run directory: {path}")
    if rec.extra.get("oom"):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_cmd)
