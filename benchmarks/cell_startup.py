"""Where a video study cell's fixed start-up goes, stage by stage, in fresh processes (GPU).

A study cell (`jouleprof run video`) spends 8–15 s on the H200 before its first training
step, beside a few seconds of process start. This times, in a new process per model (as a cell
runs), each stage of that start in order: the imports, CUDA's context, the synthetic data, the
model's build on the device, its adaptation (PEFT), the optimizer, the first training step and a
second one; then the same build again in the same process (what a warm process would pay).

    PYTHONPATH=src python3 benchmarks/cell_startup.py --out DIR [--models videomae-b,swin3d-b]
        [--method lora] [--precision bf16] [--frames 8] [--size 112]

Writes DIR/cell_startup.json (one record per model: the stages' wall seconds, the machine, the
commit from $JP_COMMIT) and prints a table. Runs on a CPU too (the CUDA stages then say so).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _child(model: str, method: str, precision: str, frames: int, size: int) -> dict:
    """The stages of one cell's start, timed in this (fresh) process."""
    t_start = time.perf_counter()
    marks: list[tuple[str, float]] = []

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter()))

    import torch

    mark("import torch")
    import jouleprof.workloads.video.adapt  # noqa: F401 — peft, transformers on demand
    from jouleprof.data.video_dataset import load_video_data
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    mark("import jouleprof video")
    import peft  # noqa: F401
    import torchvision  # noqa: F401
    import transformers  # noqa: F401
    from transformers import VideoMAEForVideoClassification  # noqa: F401

    mark("import transformers, peft, torchvision")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.cuda.init()
        torch.zeros(1, device=device)
        torch.cuda.synchronize()
    mark("CUDA context" if cuda else "CUDA context (no GPU)")
    data = load_video_data("synthetic", frames, size, seed=17, synthetic_clips=(960, 240, 240))
    mark("synthetic data (960/240/240 clips)")
    from jouleprof.workloads.video.adapt import AdaptConfig

    cfg = TrainerConfig(
        model=model,
        method=method,
        precision=precision,
        num_classes=data.num_classes,
        batch_size=16,
        frames=frames,
        size=size,
        lr=1e-3,
        adapt=AdaptConfig(total_steps=100),
        seed=17,
    )
    trainer = VideoTrainer(cfg, device)
    if cuda:
        torch.cuda.synchronize()
    mark("build + adapt + optimizer on the device")
    x = torch.randn(16, frames, 3, size, size, device=device)
    y = torch.randint(0, data.num_classes, (16,), device=device)
    for i in range(2):
        trainer.train_step(x, y)
        if cuda:
            torch.cuda.synchronize()
        mark(f"training step {i + 1}")
    trainer2 = VideoTrainer(cfg, device)
    if cuda:
        torch.cuda.synchronize()
    mark("build + adapt again (warm process)")
    trainer2.train_step(x, y)
    if cuda:
        torch.cuda.synchronize()
    mark("its first step (warm process)")
    stages, last = [], t_start
    for name, t in marks:
        stages.append({"stage": name, "wall_s": round(t - last, 3)})
        last = t
    return {
        "model": model,
        "method": method,
        "precision": precision,
        "clip": [frames, size],
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "stages": stages,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--models", default="videomae-b,swin3d-b")
    ap.add_argument("--method", default="lora")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        doc = _child(a.child, a.method, a.precision, a.frames, a.size)
        sys.stdout.write("\n" + json.dumps(doc) + "\n")
        return 0
    if a.out is None:
        ap.error("--out is required")
    a.out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    records = []
    for model in a.models.split(","):
        t0 = time.perf_counter()
        p = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                model,
                "--method",
                a.method,
                "--precision",
                a.precision,
                "--frames",
                str(a.frames),
                "--size",
                str(a.size),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            records.append({"model": model, "error": p.stderr[-2000:], "process_wall_s": wall})
            continue
        rec = json.loads(p.stdout.strip().splitlines()[-1])
        rec["process_wall_s"] = round(wall, 3)
        records.append(rec)
    meta = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": os.environ.get("JP_COMMIT"),
        "command": " ".join(["python3", "benchmarks/cell_startup.py", *(argv or sys.argv[1:])]),
    }
    (a.out / "cell_startup.json").write_text(
        json.dumps({"meta": meta, "records": records}, indent=1)
    )
    for r in records:
        print(f"== {r['model']}: process {r['process_wall_s']:.1f} s")
        for s in r.get("stages", []):
            print(f"   {s['stage']:55s} {s['wall_s']:7.2f} s")
        if "error" in r:
            print("   error:", r["error"][-400:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
