"""`jouleprof study ...`: sweeps, each cell its own process.

`study` is a command group. This module holds the group and `study vjepa2` (the batch size ×
measurement mode matrix); every other study registers itself from its own module, listed in
`_STUDY_MODULES`, through a `register_study(study_app)` function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, note
from jouleprof.cli.study_options import RunOptions, parse_numbers, run_options
from jouleprof.interrupts import exit_code_of


def parse_overrides(items: list[str]) -> dict[str, object]:
    """["compile=true", "grad_accum_steps=4"] -> {"compile": True, "grad_accum_steps": 4}."""
    import json

    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--set takes KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(
                text.strip().lower() if text.strip().lower() in ("true", "false") else text
            )
        except json.JSONDecodeError:
            out[key.strip()] = text
    return out


@run_options
def study_cmd(
    preset: Annotated[str, typer.Option(help="tiny, vit_base, vit_large, vit_huge.")] = "vit_huge",
    batch_sizes: Annotated[
        str, typer.Option(help="Comma-separated batch sizes.")
    ] = "1,2,4,8,16,32",
    modes: Annotated[
        str, typer.Option(help="Comma-separated: baseline,e2e,fine,codecarbon,zeus.")
    ] = "baseline,e2e,fine",
    reps: Annotated[int, typer.Option(help="Repetitions of every cell.")] = 3,
    duration_s: Annotated[
        float, typer.Option(help="Measured seconds per cell, after warm-up.")
    ] = 60.0,
    data: Annotated[
        str, typer.Option(help="'fake' (FakeVideo), a clip folder or a CSV of paths.")
    ] = "fake",
    overhead_pairs: Annotated[
        int, typer.Option(help="Fine cells: interleaved overhead block pairs (0 or ≥ 2).")
    ] = 2,
    overhead_block_steps: Annotated[
        int, typer.Option(help="Fine cells: steps per overhead block.")
    ] = 4,
    isolation_s: Annotated[
        float, typer.Option(help="Fine cells of rep 0: seconds per phase replay.")
    ] = 0.0,
    gpus: Annotated[
        str | None, typer.Option(help="GPU indices to measure (default: each cell's own GPU).")
    ] = None,
    cell_timeout_s: Annotated[float, typer.Option(help="Kill a cell after this long.")] = 1800.0,
    out: Annotated[
        Path, typer.Option(help="Study directory (rerun the same command to resume).")
    ] = Path("jouleprof-runs/study"),
    report: Annotated[bool, typer.Option(help="Write report.html when done.")] = True,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Workload config field for every cell, KEY=VALUE (repeatable), e.g. "
            "--set activation_checkpointing=true --set optimizer_impl=foreach.",
        ),
    ] = None,
    time_budget_s: Annotated[
        float | None, typer.Option(help="Start no new cell after this long (rerun to resume).")
    ] = None,
    max_warmup_steps: Annotated[
        int | None,
        typer.Option(
            help="Stop each cell's wait for step times to settle after this many warm-up steps "
            "(default 50; a CPU's step times rarely settle).",
            show_default=False,
        ),
    ] = None,
    run_options: RunOptions = None,  # type: ignore[assignment]  (the shared flags)
) -> None:
    """V-JEPA2: batch size × measurement mode × repetition; rerunning the same command resumes."""
    workload = "vjepa2"
    from jouleprof.bench.study import StudySpec, run_study
    from jouleprof.cli.measure import parse_gpus

    try:
        spec = StudySpec(
            workload=workload,
            preset=preset,
            batch_sizes=parse_numbers(batch_sizes, "--batch-sizes", int),
            modes=tuple(m.strip() for m in modes.split(",") if m.strip()),
            reps=reps,
            duration_s=duration_s,
            data=data,
            overhead_pairs=overhead_pairs,
            overhead_block_steps=overhead_block_steps,
            isolation_s=isolation_s,
            gpus=parse_gpus(gpus),
            cell_timeout_s=cell_timeout_s,
            overrides=parse_overrides(set_ or []),
            max_warmup_steps=max_warmup_steps,
        )
        from jouleprof.bench import workloads

        wl = workloads.get(workload)
        wl.config(preset, None, None, spec.overrides)  # a bad preset or field fails here
    except ValueError as e:
        fail(str(e))
    if run_options.name == "local":  # a Slurm job's node brings its own packages
        from jouleprof.extras import require

        require("jouleprof study vjepa2", "torch")
    if spec.gpus is not None and getattr(run_options.executor, "gpus", None) is not None:
        fail("--parallel-gpus gives each cell its own GPU: leave --gpus out")
    try:
        index = run_study(
            spec,
            out,
            time_budget_s=time_budget_s,
            progress=True,
            executor=run_options.executor,
            retry_failed=run_options.retry_failed,
        )
    except ValueError as e:
        fail(str(e))
    except KeyboardInterrupt as e:
        note(f"interrupted: rerun the same command to resume ({out})")
        raise typer.Exit(exit_code_of(e)) from None
    note(f"index: {index}")
    if report:
        try:
            from jouleprof.report.html import write_study_report
        except ImportError as e:
            note(f"no report: {e}")
            return
        note(f"report: {write_study_report(out)}")


study_app = typer.Typer(
    help="Sweeps: every cell its own process and run directory; rerun to resume.",
    no_args_is_help=True,
)
study_app.command("vjepa2")(study_cmd)

# Modules that add a study: each defines register_study(study_app).
_STUDY_MODULES = ("study_video", "study_bert", "study_energy")


def register(app: typer.Typer) -> None:
    import importlib

    for name in _STUDY_MODULES:
        try:
            mod = importlib.import_module(f"jouleprof.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"jouleprof.cli.{name}":
                raise
            continue
        mod.register_study(study_app)
    app.add_typer(study_app, name="study")
