"""`jouleprof study energy-aware`: architectures × datasets × λ × seeds, each cell a measured run.

Every cell trains with L = L_CE + λ·E (E: an internal activation energy from forward hooks),
then evaluates and infers, each in its own measured window. Rerun the same command to resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def _names(text: str, flag: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    if not out:
        raise typer.BadParameter(f"{flag} is empty: choose from {', '.join(valid)}")
    bad = [x for x in out if x not in valid]
    if bad:
        raise typer.BadParameter(
            f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(valid)}"
        )
    return out


def _lambdas(text: str, flag: str) -> tuple[float, ...]:
    from jouleprof.cli.study_options import parse_numbers

    out = parse_numbers(text, flag, float)
    bad = [v for v in out if not v >= 0 or v == float("inf")]
    if bad:
        raise typer.BadParameter(f"{flag}: λ must be finite and ≥ 0, got {bad}")
    return out


def energy_study_cmd(
    archs: Annotated[str, typer.Option(help="Comma-separated architectures.")] = "mlp,cnn,vit-tiny",
    datasets: Annotated[
        str, typer.Option(help="Comma-separated datasets.")
    ] = "digits,synthetic,shapes",
    lambdas: Annotated[
        str, typer.Option(help="Comma-separated penalty weights λ ≥ 0.")
    ] = "0,1e-5,1e-4,1e-3,1e-2",
    seeds: Annotated[int, typer.Option(help="Seeds per (arch, dataset, λ).")] = 3,
    kind: Annotated[str, typer.Option(help="What E counts: l1, l2 or nonzero-macs.")] = "l1",
    reduction: Annotated[
        str, typer.Option(help="E summed per sample (sum) or per hooked element (mean).")
    ] = "sum",
    epochs: Annotated[int, typer.Option(help="Training epochs per cell.")] = 3,
    batch_size: Annotated[int, typer.Option(help="Batch size.")] = 128,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 1e-3,
    infer_passes: Annotated[
        int, typer.Option(help="Timed inference passes over the test set.")
    ] = 5,
    precision: Annotated[str, typer.Option(help="fp32 or bf16 (autocast).")] = "fp32",
    width: Annotated[int | None, typer.Option(help="Override every arch's width.")] = None,
    depth: Annotated[int | None, typer.Option(help="Override every arch's depth.")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of local datasets (mnist, fashion-mnist, cifar10): "
            "DIR/<name>/ or DIR itself."
        ),
    ] = None,
    data_n: Annotated[
        int | None, typer.Option(help="Generated datasets: images (train+test); default 5000.")
    ] = None,
    data_side: Annotated[
        int | None, typer.Option(help="Generated datasets: image side in pixels; default 16.")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    idle_s: Annotated[float, typer.Option(help="Idle baseline per cell (s); 0 to skip.")] = 0.5,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process/--process-per-cell",
            help="Run every cell in this process (each still its own measured run directory): "
            "saves the ~3–5 s start-up of a process per cell.",
        ),
    ] = False,
    budget_s: Annotated[
        float | None, typer.Option(help="Start no new cell after this many seconds (resumable).")
    ] = None,
    retry_failed: Annotated[bool, typer.Option(help="Rerun cells recorded as failed.")] = False,
    simulate_gpu_w: Annotated[
        float | None,
        typer.Option(
            help="Testing aid: measure a simulated GPU at this power (labelled).", hidden=True
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Study directory (rerun the same command to resume).")
    ] = Path("jouleprof-runs/energy-aware"),
) -> None:
    """Train with L = L_CE + λ·E over architectures × datasets × λ × seeds; every cell measured."""
    from jouleprof.extras import require

    require("jouleprof study energy-aware", "torch")
    from jouleprof.cli.console import fail, note
    from jouleprof.energy_aware.regularizer import KINDS
    from jouleprof.workloads.energy_aware.datasets import DATASETS
    from jouleprof.workloads.energy_aware.models import ARCHS

    if kind not in KINDS:
        raise typer.BadParameter(f"--kind: unknown {kind!r}; choose from {', '.join(KINDS)}")
    overrides = {k: v for k, v in (("width", width), ("depth", depth)) if v is not None}
    from jouleprof.workloads.energy_aware.study import EnergyStudySpec, run_study

    try:
        spec = EnergyStudySpec(
            archs=_names(archs, "--archs", tuple(ARCHS)),
            datasets=_names(datasets, "--datasets", DATASETS),
            lambdas=_lambdas(lambdas, "--lambdas"),
            seeds=seeds,
            kind=kind,
            reduction=reduction,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            infer_passes=infer_passes,
            precision=precision,
            arch_overrides=overrides,
            data_dir=str(data_dir) if data_dir is not None else None,
            data_n=data_n,
            data_side=data_side,
            device=device,
            idle_s=idle_s,
            simulate_gpu_w=simulate_gpu_w,
        )
        local = [d for d in spec.datasets if d in ("mnist", "fashion-mnist", "cifar10")]
        if local:  # check the folders now, not in every cell
            from jouleprof.workloads.energy_aware.datasets import load_dataset

            for d in local:
                load_dataset(d, spec._data_dir(d))
    except ValueError as e:
        fail(str(e))
    n = len(spec.archs) * len(spec.datasets) * len(spec.lambdas) * spec.seeds
    note(f"energy-aware study: {n} cells into {out}" + (" (in process)" if in_process else ""))
    try:
        res = run_study(
            spec, out, in_process=in_process, time_budget_s=budget_s, retry_failed=retry_failed
        )
    except ValueError as e:
        fail(str(e))
    note(
        f"{len(res.done)} done, {len(res.failed)} failed, {len(res.skipped)} not run; "
        f"index: {res.index_path}. Next: jouleprof analyze {out}"
    )
    if res.failed:
        raise typer.Exit(1)


def register_study(study_app: typer.Typer) -> None:
    study_app.command("energy-aware")(energy_study_cmd)
