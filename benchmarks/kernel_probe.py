"""A GPU load with sharp, recorded edges, to find the instant power field's averaging kernel.

On the H200 the V-JEPA2 runs could not tell a 37 ms boxcar from a 20 ms exponential or a 60 ms
triangle (instant residuals within 1 %), yet the split of the short optimizer and EMA phases
depended on which (benchmarks/instant_kernel.py). This load makes the kernel visible: bursts of
bf16 matmuls of random length (10–60 ms) separated by idle gaps of random length (20–80 ms),
each burst a phase "busy" recorded with CUDA events, read at 5 ms with the counter every
refresh. The power then jumps between ~idle and near the limit at known instants that fall at
every phase of the sensor's refresh, and each kernel predicts the instant readings differently.
On a GPU it also keeps NVML's own power-sample buffer (one sample every ~20 ms) in
RUN_DIR/power_buffer.csv (`MeasureConfig.power_buffer`): the same edges time that signal too.

`--gap-load memory` fills the gaps with a memory-bound load instead of idling (elementwise adds
over 0.4 GiB, recorded as a phase "low"): the power then steps between two busy levels, as it
does inside a training step (a backward's ~600 W into a 6 ms optimizer), and
`counter_tail.py probe` asks whether the counter's late booking holds for those edges too.

    PYTHONPATH=src python3 benchmarks/kernel_probe.py --out RUN_DIR [--seconds 20]
    PYTHONPATH=src python3 benchmarks/instant_kernel.py RUN_DIR --json RUN_DIR/kernels.json
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from jouleprof import measure
from jouleprof.timeline.recorder import PhaseRecorder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--n", type=int, default=8192, help="matmul size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--gap-load",
        choices=("idle", "memory"),
        default="idle",
        help="what the GPU does between bursts: idle (sleep) or a memory-bound phase 'low'",
    )
    ap.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="no GPU: matmuls on the CPU, a simulated GPU sensor (checks the script, not a kernel)",
    )
    a = ap.parse_args()
    if not a.cpu_dry_run and not torch.cuda.is_available():
        raise SystemExit("kernel_probe needs a CUDA GPU (or --cpu-dry-run to check the script)")
    dev = "cpu" if a.cpu_dry_run else "cuda"
    sync = (lambda: None) if a.cpu_dry_run else torch.cuda.synchronize
    where = (
        {"gpus": (), "simulate_gpu_w": 300.0, "idle_s": 0.2}
        if a.cpu_dry_run
        else {"gpus": (0,), "power_buffer": True}
    )
    rng = random.Random(a.seed)
    x = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)

    def seconds_per_call(fn, n: int) -> float:
        for _ in range(10):
            fn()
        sync()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t) / n

    per_mm_s = seconds_per_call(lambda: torch.matmul(x, y, out=z), 20)
    per_add_s = 0.0
    if a.gap_load == "memory":
        per_add_s = seconds_per_call(lambda: torch.add(x, y, out=z), 50)
    with measure(
        a.out, interval_s=0.005, counter_interval_s=0.1, kind="kernel_probe", **where
    ) as m:
        rec = PhaseRecorder(m.clock, m.span_writer(), record=m.record)
        m.record.extra["matmul_s"] = per_mm_s
        m.record.extra["gap_load"] = a.gap_load
        if per_add_s:
            m.record.extra["add_s"] = per_add_s
        t_end = time.perf_counter() + a.seconds
        while time.perf_counter() < t_end:
            busy_s, idle_s = rng.uniform(0.010, 0.060), rng.uniform(0.020, 0.080)
            with rec.step(), rec.phase("busy"):
                for _ in range(max(1, round(busy_s / per_mm_s))):
                    torch.matmul(x, y, out=z)
            if a.gap_load == "memory":
                with rec.step(), rec.phase("low"):
                    for _ in range(max(1, round(idle_s / per_add_s))):
                        torch.add(x, y, out=z)
                sync()  # keeps the host within one gap of the GPU
            else:
                sync()  # the GPU really idles during the gap
                time.sleep(idle_s)
        rec.close()
    add = f", add {per_add_s * 1e3:.3f} ms" if per_add_s else ""
    print(f"run directory: {a.out} (matmul {per_mm_s * 1e3:.2f} ms{add})")


if __name__ == "__main__":
    main()
