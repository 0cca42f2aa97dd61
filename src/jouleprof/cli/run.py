"""`jouleprof run ...`: one measured run in one process (`run video`: fine-tune a video model)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, flags_named, note, note_if_no_cuda, out_console

run_app = typer.Typer(
    help="One measured run, one process, one run directory.", no_args_is_help=True
)


def video_cmd(
    model: Annotated[str, typer.Option(help="videomae-b, timesformer-b, swin3d-b, hiera-b.")],
    method: Annotated[str, typer.Option(help="full, lora, qlora, adalora, bitfit.")] = "lora",
    precision: Annotated[str, typer.Option(help="fp32, fp16, bf16, int8.")] = "bf16",
    dataset: Annotated[
        str, typer.Option(help="'synthetic' (moving shapes) or a manifest CSV.")
    ] = "synthetic",
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of init, data order, augmentation.")] = 17,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 1e-4,
    batch_size: Annotated[int, typer.Option(help="Clips per training step.")] = 4,
    checkpointing: Annotated[bool, typer.Option(help="Activation checkpointing.")] = False,
    weights: Annotated[
        str | None, typer.Option(help="Pretrained weights: local path or hub id.")
    ] = None,
    test: Annotated[bool, typer.Option(help="Evaluate the test split at the end.")] = False,
    cache: Annotated[str | None, typer.Option(help="Frame cache of the manifest.")] = None,
    root: Annotated[str | None, typer.Option(help="Dataset root of the manifest.")] = None,
    tiny: Annotated[bool, typer.Option(help="A few-layer model (CPU demos, tests).")] = False,
    frames: Annotated[int | None, typer.Option(help="Frames per clip (model default).")] = None,
    size: Annotated[int | None, typer.Option(help="Frame side (model default).")] = None,
    max_steps_per_epoch: Annotated[
        int | None, typer.Option(help="Cut each epoch after this many steps (smoke runs).")
    ] = None,
    num_workers: Annotated[
        int | None, typer.Option(help="Data-loader workers (default: 4, at most the usable cores).")
    ] = None,
    synthetic_clips: Annotated[
        str, typer.Option(help="Synthetic dataset: train,val,test clip counts.")
    ] = "480,120,120",
    deploy: Annotated[bool, typer.Option(help="Measure the deployment cost.")] = True,
    deploy_sustained_s: Annotated[
        float, typer.Option(help="Seconds of the sustained inference loop.")
    ] = 10.0,
    deploy_from: Annotated[
        str | None,
        typer.Option(
            help="A finished run of the same model, method, precision, clip and deployment "
            "settings on the same GPU: take its deployment cost instead of measuring one "
            "(measured here, with a note, where it is not such a run)."
        ),
    ] = None,
    idle_s: Annotated[float, typer.Option(help="Idle baseline, seconds.")] = 1.0,
    simulate_gpu_w: Annotated[
        float | None,
        typer.Option(help="Testing aid: a simulated GPU at this constant power (labelled so)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Run directory to create (default: jouleprof-runs/video-<...>-<time>)."),
    ] = None,
) -> None:
    """Fine-tune a video classifier, metered per phase; validation, test and deployment cost
    metered separately; NetScore variants with intervals in run.json."""
    from jouleprof.extras import VIDEO_MODULES, require

    require("jouleprof run video", *VIDEO_MODULES, extra="video")
    from jouleprof.bench.video_run import VideoRunConfig, run_video
    from jouleprof.errors import JouleprofError

    try:
        clips = tuple(int(v) for v in synthetic_clips.split(","))
    except ValueError:
        raise typer.BadParameter(
            f"--synthetic-clips takes three integers train,val,test, got {synthetic_clips!r}"
        ) from None
    try:
        cfg = VideoRunConfig(
            model=model,
            method=method,
            precision=precision,
            dataset=dataset,
            cache=cache,
            root=root,
            epochs=epochs,
            seed=seed,
            lr=lr,
            batch_size=batch_size,
            checkpointing=checkpointing,
            weights=weights,
            tiny=tiny,
            frames=frames,
            size=size,
            test=test,
            max_steps_per_epoch=max_steps_per_epoch,
            num_workers=num_workers,
            synthetic_clips=clips,
            deploy=deploy,
            deploy_sustained_s=deploy_sustained_s,
            deploy_from=deploy_from,
            idle_s=idle_s,
            simulate_gpu_w=simulate_gpu_w,
        )
    except ValueError as e:
        # VideoRunConfig names its fields (batch_size); say the flags the user typed
        fail(flags_named(str(e), video_cmd))
    if out is None:
        import time

        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path("jouleprof-runs") / f"video-{model}-{method}-{precision}-{stamp}"
    note_if_no_cuda(
        "fine-tuning",
        "with no GPU energy or memory measured; a full-size video model trains slowly here",
        None if tiny else "--tiny --max-steps-per-epoch 2 for a smoke test",
    )
    from jouleprof.cli.console import err_console, working

    try:
        with working(f"fine-tuning {model} ({method}, {precision})…") as w:

            def progress(text: str, keep: bool = False) -> None:
                if keep:
                    err_console.print(text, highlight=False)
                else:
                    w.update(text)

            path = run_video(cfg, out, on_progress=progress)
    except (ValueError, JouleprofError) as e:
        fail(flags_named(str(e), video_cmd))
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (jouleprof.interrupts): as profile says
        from jouleprof.interrupts import exit_code_of

        if (out / "run.json").is_file():
            note(f"interrupted: {out} holds everything recorded until then")
        else:
            note("interrupted before the measurement began: nothing was recorded")
        raise typer.Exit(exit_code_of(e)) from None
    from jouleprof.store.rundir import RunDir

    rec = RunDir(path).read_record()
    from jouleprof.cli.console import summary_table

    keys = [
        "val_top1_pct",
        "test_top1_pct",
        "train_time_s",
        "train_energy_j",
        "train_peak_mem_mib",
        "val_energy_j",
        "deploy_latency_s",
        "deploy_energy_per_clip_j",
        "deploy_peak_mem_mib",
        "ns_e",
        "ns_m",
        "ns_hash",
    ]
    shown = {k: rec.summary[k] for k in keys if k in rec.summary}
    out_console.print(summary_table(shown, f"{model} {method} {precision}: {rec.status.value}"))
    for line in rec.notes:
        if line.startswith("deployment cost"):  # where --deploy-from was or was not taken
            note(line)
    if rec.extra.get("oom"):
        note("out of memory: recorded as a result (status oom in a study)")
    note(f"run directory: {path}")


run_app.command("video")(video_cmd)


def register(app: typer.Typer) -> None:
    app.add_typer(run_app, name="run")
