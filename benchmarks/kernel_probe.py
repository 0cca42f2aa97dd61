"""A GPU load with sharp, recorded edges, to find the instant power field's averaging kernel.

On the H200 the V-JEPA2 runs could not tell a 37 ms boxcar from a 20 ms exponential or a 60 ms
triangle (instant residuals within 1 %), yet the split of the short optimizer and EMA phases
depended on which (benchmarks/instant_kernel.py). This load makes the kernel visible: bursts of
bf16 matmuls of random length (10–60 ms) separated by idle gaps of random length (20–80 ms),
each burst a phase "busy" recorded with CUDA events, read at 5 ms with the counter every
refresh. The power then jumps between ~idle and near the limit at known instants that fall at
every phase of the sensor's refresh, and each kernel predicts the instant readings differently.
On a GPU it also keeps NVML's own power-sample buffer (one sample every ~20 ms) in
RUN_DIR/power_buffer.csv, read once a second: the same edges time that signal too.

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


class PowerBuffer:
    """Reads NVML's power-sample buffer (`nvmlDeviceGetSamples`, one sample every ~20 ms, the
    last ~2.4 s kept; benchmarks/results/nvml_read_cost) once a second on a thread, so that
    the probe's bursts can also show what window each buffered sample averages.

    Rows: the sample's time on the run's clock (its driver timestamp, µs of wall time, mapped
    through a wall/run clock pair taken at start), its power, the raw timestamp.
    """

    def __init__(self, clock, gpu: int = 0, every_s: float = 1.0, nv=None) -> None:
        import threading

        if nv is None:
            import pynvml as nv

        self._nv, self._clock, self._every = nv, clock, every_s
        nv.nvmlInit()
        self._h = nv.nvmlDeviceGetHandleByIndex(gpu)
        self._wall0, self._run0 = time.time(), clock.now_s()
        self._last_us = int(self._wall0 * 1e6)
        self.rows: list[tuple[float, float, int]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        nv = self._nv
        try:
            vtype, samples = nv.nvmlDeviceGetSamples(
                self._h, nv.NVML_TOTAL_POWER_SAMPLES, self._last_us
            )
        except Exception as e:  # NVML's NOT_FOUND: no new sample since the last read
            self.errors.append(repr(e))
            return
        member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}.get(vtype, "uiVal")
        for smp in samples:
            ts = int(smp.timeStamp)
            if ts <= self._last_us:
                continue
            t_run = self._run0 + (ts / 1e6 - self._wall0)
            self.rows.append((t_run, getattr(smp.sampleValue, member) / 1e3, ts))
        if self.rows:
            self._last_us = max(self._last_us, self.rows[-1][2])

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self._read()

    def close(self, path: Path) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        self._nv.nvmlShutdown()
        with open(path, "w") as f:
            f.write("t_s,power_w,timestamp_us\n")
            f.writelines(f"{t:.6f},{w:.3f},{ts}\n" for t, w, ts in self.rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--n", type=int, default=8192, help="matmul size")
    ap.add_argument("--seed", type=int, default=0)
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
        {"gpus": (), "simulate_gpu_w": 300.0, "idle_s": 0.2} if a.cpu_dry_run else {"gpus": (0,)}
    )
    rng = random.Random(a.seed)
    x = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    for _ in range(10):
        torch.matmul(x, y, out=z)
    sync()
    t = time.perf_counter()
    for _ in range(20):
        torch.matmul(x, y, out=z)
    sync()
    per_mm_s = (time.perf_counter() - t) / 20
    with measure(
        a.out, interval_s=0.005, counter_interval_s=0.1, kind="kernel_probe", **where
    ) as m:
        rec = PhaseRecorder(m.clock, m.span_writer(), record=m.record)
        m.record.extra["matmul_s"] = per_mm_s
        buffer = None
        if not a.cpu_dry_run:
            try:  # an extra: the probe's own figures must not depend on it
                buffer = PowerBuffer(m.clock)
            except Exception as e:
                m.record.extra["power_buffer"] = {"error": repr(e)}
        t_end = time.perf_counter() + a.seconds
        while time.perf_counter() < t_end:
            busy_s, idle_s = rng.uniform(0.010, 0.060), rng.uniform(0.020, 0.080)
            with rec.step(), rec.phase("busy"):
                for _ in range(max(1, round(busy_s / per_mm_s))):
                    torch.matmul(x, y, out=z)
            sync()  # the GPU really idles during the gap
            time.sleep(idle_s)
        rec.close()
        if buffer is not None:
            buffer.close(a.out / "power_buffer.csv")
            m.record.extra["power_buffer"] = {"n": len(buffer.rows), "errors": buffer.errors[:5]}
    print(f"run directory: {a.out} (matmul {per_mm_s * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
