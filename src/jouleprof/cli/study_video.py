"""`jouleprof study video`: staged search and confirmation of video fine-tuning (one process per
cell, resumable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, note, refuse_file_out
from jouleprof.interrupts import exit_code_of


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _lrs(items: list[str]) -> dict[str, tuple[float, ...]]:
    """["lora=1e-4,3e-4", "full=1e-5"] -> {"lora": (1e-4, 3e-4), "full": (1e-5,)}."""
    out = {}
    for item in items:
        method, sep, values = item.partition("=")
        try:
            out[method.strip()] = tuple(float(v) for v in values.split(",") if v.strip())
        except ValueError:
            sep = ""
        if not sep or not out.get(method.strip()):
            raise typer.BadParameter(f"--lr takes METHOD=LR[,LR...], got {item!r}")
    return out


def study_video_cmd(
    stage: Annotated[
        str,
        typer.Option(
            help="smoke, search, confirm, or all (comma-separated); search-lr or "
            "search-ablation run one part of search."
        ),
    ] = "all",
    models: Annotated[str, typer.Option(help="Comma-separated models.")] = "videomae-b,hiera-b",
    methods: Annotated[str, typer.Option(help="Comma-separated methods.")] = "full,lora,bitfit",
    base_precision: Annotated[str, typer.Option(help="Precision of the lr search.")] = "bf16",
    precisions: Annotated[
        str, typer.Option(help="Precisions of the ablation.")
    ] = "fp32,fp16,bf16,int8",
    checkpointing_ablation: Annotated[
        bool, typer.Option(help="Ablate activation checkpointing too.")
    ] = True,
    lr: Annotated[
        list[str] | None,
        typer.Option("--lr", help="Learning rates of a method, METHOD=LR[,LR...] (repeatable)."),
    ] = None,
    epochs: Annotated[int, typer.Option(help="Epochs of each search cell.")] = 3,
    confirm_epochs: Annotated[int, typer.Option(help="Epochs of each confirmation run.")] = 10,
    confirm_seeds: Annotated[str, typer.Option(help="Seeds of the confirmation.")] = "17,18,19",
    dataset: Annotated[str, typer.Option(help="'synthetic' or a manifest CSV.")] = "synthetic",
    cache: Annotated[str | None, typer.Option(help="Frame cache of the manifest.")] = None,
    root: Annotated[str | None, typer.Option(help="Dataset root of the manifest.")] = None,
    batch_size: Annotated[int, typer.Option(help="Clips per step.")] = 4,
    tiny: Annotated[bool, typer.Option(help="Few-layer models (CPU tests).")] = False,
    frames: Annotated[int | None, typer.Option(help="Frames per clip.")] = None,
    size: Annotated[int | None, typer.Option(help="Frame side.")] = None,
    synthetic_clips: Annotated[str, typer.Option(help="train,val,test clips.")] = "480,120,120",
    max_steps_per_epoch: Annotated[int | None, typer.Option(help="Cut each epoch.")] = None,
    num_workers: Annotated[
        int | None,
        typer.Option(help="Data-loader workers per cell (default: 4, at most the usable cores)."),
    ] = None,
    deploy_sustained_s: Annotated[
        float, typer.Option(help="Seconds of each cell's inference loop.")
    ] = 10.0,
    reuse_deployment: Annotated[
        bool,
        typer.Option(
            help="Measure the deployment cost once per model × method × precision; later "
            "cells of it take the first one's."
        ),
    ] = True,
    idle_s: Annotated[float, typer.Option(help="Idle baseline per cell.")] = 1.0,
    simulate_gpu_w: Annotated[
        float | None, typer.Option(help="Testing aid: simulated GPU power.")
    ] = None,
    cell_timeout_s: Annotated[float, typer.Option(help="Kill a cell after this long.")] = 1800.0,
    executor: Annotated[str, typer.Option(help="local or slurm.")] = "local",
    preload: Annotated[
        bool,
        typer.Option(
            help="Local executor: fork each cell from one process that imported torch, "
            "transformers and peft once (each cell is still its own process)."
        ),
    ] = True,
    retry_failed: Annotated[bool, typer.Option(help="Rerun failed cells.")] = False,
    time_budget_s: Annotated[
        float | None, typer.Option(help="Start no new cell after this long (rerun to resume).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Study directory (rerun to resume).")] = Path(
        "jouleprof-runs/study-video"
    ),
) -> None:
    """Video fine-tuning: smoke; lr per method, then precision × checkpointing; confirm."""
    from jouleprof.extras import VIDEO_MODULES, require

    refuse_file_out(out)
    if executor == "local":  # a Slurm job's node brings its own packages
        require("jouleprof study video", *VIDEO_MODULES, extra="video")
    from jouleprof.bench.video_study import DEFAULT_LRS, STAGES, VideoStudyConfig, run_video_study

    stages = STAGES if stage == "all" else _names(stage)
    try:
        lrs = dict(DEFAULT_LRS)
        lrs.update(_lrs(lr or []))
        clips = tuple(int(v) for v in synthetic_clips.split(","))
        seeds = tuple(int(v) for v in confirm_seeds.split(","))
        cfg = VideoStudyConfig(
            models=_names(models),
            methods=_names(methods),
            base_precision=base_precision,
            precisions=_names(precisions),
            checkpointing_ablation=checkpointing_ablation,
            lrs={k: v for k, v in lrs.items() if k in _names(methods)},
            epochs=epochs,
            confirm_epochs=confirm_epochs,
            confirm_seeds=seeds,
            dataset=dataset,
            cache=cache,
            root=root,
            batch_size=batch_size,
            tiny=tiny,
            frames=frames,
            size=size,
            synthetic_clips=clips,
            max_steps_per_epoch=max_steps_per_epoch,
            num_workers=num_workers,
            deploy_sustained_s=deploy_sustained_s,
            reuse_deployment=reuse_deployment,
            idle_s=idle_s,
            simulate_gpu_w=simulate_gpu_w,
            cell_timeout_s=cell_timeout_s,
        )
        plan = run_video_study(
            cfg,
            out,
            tuple(stages),
            executor=executor,
            retry_failed=retry_failed,
            time_budget_s=time_budget_s,
            preload=preload,
            on_stage=lambda s, n: note(f"stage {s}: {n} cell(s)"),
        )
    except ValueError as e:
        fail(str(e))
    except KeyboardInterrupt as e:
        note(f"interrupted: rerun the same command to resume ({out})")
        raise typer.Exit(exit_code_of(e)) from None
    for item in plan.get("left_out", []):
        note(f"left out {item['model']} {item['method']} {item['precision']}: {item['reason']}")
    failed = [c for s in plan["stages"].values() for c in s["failed"]]
    note(f"study: {out} (runs.csv); `jouleprof summarize {out}` writes the tables")
    if failed:
        note(f"{len(failed)} cell(s) failed (see their error.txt): {', '.join(failed[:8])}")


def register_study(study_app: typer.Typer) -> None:
    study_app.command("video")(study_video_cmd)
