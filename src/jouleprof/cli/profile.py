"""`jouleprof profile WORKLOAD`: train a workload under one mode and write its run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import (
    err_console,
    fail,
    flags_named,
    note,
    refuse_file_out,
    summary_table,
    working,
)


def profile_cmd(
    workload: Annotated[
        str, typer.Argument(help="Registered workload to train: vjepa2, video, ...")
    ] = "vjepa2",
    preset: Annotated[
        str,
        typer.Option(
            help="The workload's preset: vjepa2 tiny, vit_base, vit_large, vit_huge; video a "
            "model (videomae-b, timesformer-b, swin3d-b, hiera-b; ':tiny' for a small config)."
        ),
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
        int | None,
        typer.Option(
            help="Fine mode: interleaved overhead block pairs (default: 4 where the workload "
            "trains on a GPU, 0 on a CPU, where the recorder's overhead says nothing of a GPU's).",
            show_default=False,
        ),
    ] = None,
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
    excite: Annotated[
        bool,
        typer.Option(
            help="Fine mode: put short random gaps (0.5-5 ms) before the phases of 25 % of the "
            "steps in the first 30 s, so that phases every step runs alike can be told apart; "
            "attribution reports what they cost (docs/excitation.md)."
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
    simulate_gpu: Annotated[
        bool | None,
        typer.Option(
            "--simulate-gpu/--no-simulate-gpu",
            help="Where no NVIDIA GPU was measured (fine mode): drive the package's simulated GPU "
            "with the recorded phase times, then attribute its energy, so attribution can be "
            "seen at work. Every figure from it is labelled SIMULATED. Default: on where no "
            "GPU was measured.",
            show_default=False,
        ),
    ] = None,
    max_warmup_steps: Annotated[
        int | None,
        typer.Option(
            help="Stop waiting for step times to settle after this many warm-up steps "
            "(default: 50 on a GPU, 10 on a CPU, whose step times rarely settle).",
            min=1,
            show_default=False,
        ),
    ] = None,
    report: Annotated[bool, typer.Option(help="Write report.html into the run directory.")] = True,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Workload config field, KEY=VALUE (repeatable), e.g. --set method=lora "
            "--set precision=bf16 for the video workload.",
        ),
    ] = None,
) -> None:
    """Train WORKLOAD, measure it, attribute each phase's energy, and write a report."""
    from jouleprof.extras import require

    require("jouleprof profile", "torch")
    from jouleprof.bench.train import CellConfig, run_cell
    from jouleprof.bench.warmup import WarmupRule
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
    set_by_name: dict = {}
    if set_:
        from jouleprof.cli.study import parse_overrides

        set_by_name = parse_overrides(set_)
        overrides.update(set_by_name)
    fine = mode == "fine"
    on_gpu = _trains_on_gpu()
    if overhead_pairs is None:
        overhead_pairs = 4 if fine and on_gpu else 0
    warmup = WarmupRule(max_steps=max_warmup_steps or (50 if on_gpu else 10))
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
            excite=excite,
            power_buffer=power_buffer,
            gpus=parse_gpus(gpus),
            overrides=overrides,
            warmup=warmup,
        )
    except ValueError as e:
        # CellConfig and the workload's config name their fields (duration_s); say the flags.
        fail(flags_named(str(e), profile_cmd, skip=set_by_name))
    path = out or Path(DEFAULT_RUNS_DIR) / new_run_id(f"profile-{workload}")
    refuse_file_out(path)
    length = f"{steps} steps" if steps is not None else f"{duration_s:g} s"
    try:
        with working(
            f"training {workload} ({preset}, {mode} mode, {length} measured) into {path}…"
        ):
            run_cell(cfg, path)
    except (JouleprofError, ValueError) as e:
        fail(flags_named(str(e), profile_cmd, skip=set_by_name))
    except KeyboardInterrupt:
        note(f"interrupted: {path} holds everything recorded until then")
        raise typer.Exit(130) from None
    rec = RunDir(path).read_record()
    if fine and simulate_gpu is not False and not rec.extra.get("oom"):
        _simulate_if_unmeasured(path, rec, forced=simulate_gpu is True)
        rec = RunDir(path).read_record()
    err_console.print(summary_table(rec.summary, f"{rec.run_id} ({rec.status.value})"))
    trained = rec.extra.get("trained_on")
    if trained:
        note(f"trained on: {trained}")
    from jouleprof.cli.attribute import attribution_failures, print_phases_file

    for line in attribution_failures(rec.extra):
        note(line)

    print_phases_file(path)
    from jouleprof.attribution.excitation import recorded_costs

    for line in recorded_costs(rec.extra):
        note(line)
    sim = rec.extra.get("simulated_gpu")
    if sim:
        err_console.print(f"[bold magenta]{escape(sim['note'])}[/]", highlight=False)
    if report:
        from jouleprof.report.html import write_run_report

        p = write_run_report(path)
        note(f"report: {p}")
    note(f"run directory: {path}")
    if rec.extra.get("oom"):
        raise typer.Exit(1)


def _trains_on_gpu() -> bool:
    """Whether torch sees a CUDA GPU here (the workloads train there when it does)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _simulate_if_unmeasured(path: Path, rec, forced: bool) -> None:
    """Run the simulated GPU on the recorded phases where no real GPU was measured."""
    from jouleprof.bench.simulate import gpu_was_measured, simulate_run
    from jouleprof.errors import JouleprofError
    from jouleprof.store.rundir import RunDir

    rd = RunDir(path)
    if gpu_was_measured(rd):
        if forced:
            note("--simulate-gpu ignored: this run measured a real GPU")
        return
    if not rd.has("spans.csv") or (path / "spans.csv").stat().st_size == 0:
        return
    gpu = rec.summary.get("gpu_energy_j")
    why = (gpu.reason if gpu is not None else None) or "no NVIDIA GPU was measured"
    try:
        with working("no NVIDIA GPU measured: attributing a simulated GPU's energy…"):
            simulate_run(path, why)
    except JouleprofError as e:
        note(f"simulated GPU not run: {e}")


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_cmd)
