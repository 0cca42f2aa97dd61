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
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPLIT = {"smoke": 0.08, "search-lr": 0.42, "search-ablation": 0.3, "confirm": 0.2}


def _git() -> str:
    try:
        r = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        return r.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def _meta(out: Path, argv: list[str], extra: dict) -> None:
    meta = {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["PYTHONPATH=src", "python3", "benchmarks/video_study.py", *argv]),
        "git_commit": os.environ.get("JP_COMMIT") or _git(),
        "python": platform.python_version(),
        **extra,
    }
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as e:
        meta["torch"] = f"unavailable: {e}"
    try:
        import pynvml

        pynvml.nvmlInit()
        meta["driver"] = pynvml.nvmlSystemGetDriverVersion()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        meta["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
        pynvml.nvmlShutdown()
    except Exception as e:
        meta["driver"] = f"unavailable: {type(e).__name__}"
    p = out / "meta.json"
    calls = json.loads(p.read_text()).get("calls", []) if p.exists() else []
    meta["calls"] = [*calls, meta["date_utc"]]
    p.write_text(json.dumps(meta, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--models", default="videomae-b,swin3d-b")
    ap.add_argument("--methods", default="full,lora")
    ap.add_argument("--smoke", action="store_true", help="CPU check: tiny models, few steps")
    args = ap.parse_args(argv)
    # Cells are subprocesses started elsewhere: they need the package on an absolute path.
    src = str(ROOT / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    sys.path.insert(0, src)
    from jouleprof.bench.video_study import VideoStudyConfig, run_video_study
    from jouleprof.report.video_summary import best_per_model, cell_rows, write_summary

    methods = tuple(m for m in args.methods.split(",") if m)
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
        # Sized for ~8 minutes on one H200 (the budget gates starts; a cell started just
        # before it ends still runs): ~25 s a cell (process start and model build
        # ~10 s, two short epochs, a 3 s inference loop); 2 models × 2 methods give 2 smoke,
        # 8 learning-rate, 8 ablation (fp16; checkpointing at bf16) and 4 confirmation cells.
        cfg = VideoStudyConfig(
            models=tuple(args.models.split(",")),
            methods=methods,
            base_precision="bf16",
            precisions=("fp16", "bf16"),
            checkpointing_ablation=True,
            lrs={
                "full": (3e-5, 1e-4),
                "lora": (3e-4, 1e-3),
                "bitfit": (1e-3, 3e-3),
                "qlora": (3e-4, 1e-3),
                "adalora": (3e-4, 1e-3),
            },
            epochs=2,
            confirm_epochs=3,
            confirm_seeds=(17, 18),
            batch_size=8,
            synthetic_clips=(192, 96, 96),
            num_workers=8,
            deploy_sustained_s=5.0,
            idle_s=1.0,
            cell_timeout_s=300,
        )
        cfg = VideoStudyConfig(**{**cfg.__dict__, "lrs": {m: cfg.lrs[m] for m in methods}})
    args.out.mkdir(parents=True, exist_ok=True)
    _meta(args.out, argv, {"budget_s": args.budget_s, "study": cfg.to_json()})
    t0 = time.monotonic()
    plan = run_video_study(
        cfg,
        args.out,
        time_budget_s=args.budget_s,
        budget_split=SPLIT,
        progress=True,
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
    raise SystemExit(main())
