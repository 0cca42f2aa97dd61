"""A staged video fine-tuning study on the synthetic dataset within a time budget (GPU).

    PYTHONPATH=src python3 benchmarks/video_study.py --out DIR --budget-s 420 [--models ...]
    PYTHONPATH=src python3 benchmarks/video_study.py --out DIR --smoke     # CPU check: tiny models

Runs `jouleprof study video` (smoke; learning rate per method; precision and checkpointing
ablation at each method's best rate; confirmation of each model's best NS# configuration with
test, over seeds), every cell its own process through the study machinery, so an OOM or a
crash is a row. The budget is split over the stages (what one leaves goes to the next); a
rerun with the same arguments resumes. Then writes the summary tables (video_summary.md,
video_runs.csv), meta.json (date, commit from $JP_COMMIT, GPU, driver, torch, the command) and
prints the best-per-model table. Needs no PyAV (the synthetic clips are rendered in numpy).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPLIT = {"smoke": 0.08, "search-lr": 0.42, "search-ablation": 0.3, "confirm": 0.2}
GPU_LRS: dict[str, tuple[float, ...]] = {
    "full": (3e-4, 1e-4),
    "lora": (3e-3, 1e-3),
    "bitfit": (3e-3, 1e-3),
    "qlora": (3e-3, 1e-3),
    "adalora": (3e-3, 1e-3),
}
"""Learning rates searched per method on the GPU, the likelier first (a study cut short runs
every method's first rate before any second one). The models are randomly initialized, so the
rates are higher than fine-tuning from a checkpoint would use."""
PRESETS: dict[str, dict] = {
    "full": {"epochs": 6, "clips": "960,240,240"},
    "compact": {"epochs": 4, "clips": "480,120,120"},
}
"""Sizes of the GPU study: a search cell trains epochs x clips/16 steps (full: 360, compact:
120), a confirmation cell 10 epochs (full: 600 steps, compact: 300)."""


def _meta(out: Path, argv: list[str], extra: dict) -> None:
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    command = ["PYTHONPATH=src", "python3", "benchmarks/video_study.py", *argv]
    write_meta(out, {**benchmark_meta(command, root=ROOT), **extra}, keep_calls=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--models", default="videomae-b,swin3d-b")
    ap.add_argument("--methods", default="full,lora")
    ap.add_argument("--smoke", action="store_true", help="CPU check: tiny models, few steps")
    ap.add_argument(
        "--lr-only",
        action="store_true",
        help="only the smoke cells and the learning-rate search (no ablation, no confirmation)",
    )
    ap.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="full",
        help="GPU sizes: 'full' (960 training clips, 6-epoch search) or 'compact' (480 clips, "
        "4-epoch search: sized to fit beside the probe in ~30 GPU-minutes); explicit flags win",
    )
    ap.add_argument("--no-preload", action="store_true", help="cells as plain processes")
    ap.add_argument("--frames", type=int, default=8, help="frames per clip (GPU run)")
    ap.add_argument("--size", type=int, default=112, help="frame side in pixels (GPU run)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs of every search cell")
    ap.add_argument("--confirm-epochs", type=int, default=10)
    ap.add_argument("--confirm-seeds", default="17,18,19", help="seeds of the confirmation runs")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--clips", default=None, help="synthetic clips in train,val,test (GPU run)")
    ap.add_argument(
        "--lr",
        action="append",
        default=[],
        metavar="METHOD=LR,LR",
        help="learning rates of one method (repeatable); defaults in the script",
    )
    ap.add_argument("--precisions", default="fp16,bf16", help="precisions of the ablation")
    args = ap.parse_args(argv)
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    # Cells are subprocesses started elsewhere: they need the package on an absolute path.
    src = str(ROOT / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    sys.path.insert(0, src)
    from jouleprof.bench.video_study import VideoStudyConfig, run_video_study
    from jouleprof.report.video_summary import best_per_model, cell_rows, write_summary

    methods = tuple(m for m in args.methods.split(",") if m)
    lrs = dict(GPU_LRS)
    for item in args.lr:
        meth, _, values = item.partition("=")
        lrs[meth] = tuple(float(v) for v in values.split(",") if v)
    if args.smoke:
        cfg = VideoStudyConfig(
            models=tuple(args.models.split(",")),
            methods=methods,
            base_precision="fp32",
            precisions=("fp32", "bf16"),
            lrs={m: (1e-3,) for m in methods},
            epochs=1,
            confirm_epochs=1,
            confirm_seeds=(17,),
            tiny=True,
            synthetic_clips=(16, 8, 8),
            max_steps_per_epoch=2,
            num_workers=0,
            deploy_sustained_s=0.3,
            idle_s=0.0,
            simulate_gpu_w=150.0,
            cell_timeout_s=600,
        )
    else:
        # Randomly initialized models (nothing can be downloaded on the GPU machine) must learn
        # the synthetic task from scratch inside one cell, so a cell trains hundreds of steps:
        # clips of 8 x 112^2 (a tenth of 16 x 224^2's tokens: ~20-40 ms a step on an H200),
        # 960 training clips, batch 16, 6 epochs = 360 steps, then a 5 s inference loop;
        # ~30-45 s a cell with process start and model build.
        precisions = tuple(p for p in args.precisions.split(",") if p)
        cfg = VideoStudyConfig(
            models=tuple(args.models.split(",")),
            methods=methods,
            base_precision="bf16",
            precisions=precisions,
            checkpointing_ablation=True,
            lrs=lrs,
            epochs=args.epochs,
            confirm_epochs=args.confirm_epochs,
            confirm_seeds=tuple(int(x) for x in args.confirm_seeds.split(",") if x),
            batch_size=args.batch_size,
            frames=args.frames,
            size=args.size,
            synthetic_clips=tuple(int(x) for x in args.clips.split(",")),
            num_workers=8,
            deploy_sustained_s=5.0,
            idle_s=1.0,
            cell_timeout_s=300,
        )
        cfg = VideoStudyConfig(**{**cfg.__dict__, "lrs": {m: cfg.lrs[m] for m in methods}})
    # --lr-only leaves the study's settings as they are, so the same command without it resumes.
    stages = ("smoke", "search-lr") if args.lr_only else ("smoke", "search", "confirm")
    args.out.mkdir(parents=True, exist_ok=True)
    _meta(args.out, argv, {"budget_s": args.budget_s, "study": cfg.to_json()})
    t0 = time.monotonic()
    plan = run_video_study(
        cfg,
        args.out,
        stages,
        time_budget_s=args.budget_s,
        budget_split=SPLIT,
        progress=True,
        preload=not args.no_preload,
        on_stage=lambda s, n: print(
            f"== stage {s}: {n} cell(s), {time.monotonic() - t0:.0f} s in", flush=True
        ),
    )
    md, csv_path = write_summary(args.out)
    rows = cell_rows(args.out)
    print(f"\n{len(rows)} cells in {time.monotonic() - t0:.0f} s; tables: {md}, {csv_path}")
    for stage, s in plan["stages"].items():
        print(
            f"  {stage:16s} done {len(s['done'])}, failed {len(s['failed'])}, "
            f"not started {len(s['skipped'])}"
        )
    print(f"\n{'model':14s} {'best by NS#':32s} {'val%':>6s} {'MiB':>7s} {'NS#':>7s}  interval")
    for b in best_per_model(rows):
        r = b["best"]
        if r is None:
            print(f"{b['model']:14s} no run with an NS#")
            continue
        cfg_text = f"{r['method']} {r['precision']}{' ckpt' if r['checkpointing'] else ''}"
        print(
            f"{b['model']:14s} {cfg_text:32s} {r['val_top1_pct']:6.1f} "
            f"{(r['train_peak_mem_mib'] or float('nan')):7.0f} {r['ns_hash']:7.2f}  "
            f"[{r['ns_hash_lo']:.2f}, {r['ns_hash_hi']:.2f}] ties {len(b['tied'])}"
        )
    (args.out / "DONE.txt").write_text(f"finished {dt.datetime.now(dt.UTC).isoformat()}\n")
    return 0


if __name__ == "__main__":
    from jouleprof.interrupts import terminate_as_interrupt

    terminate_as_interrupt()  # `timeout` stops the cells too, and records them
    raise SystemExit(main())
