"""Is a replayed forward+backward the same work as the one inside a training step? A GPU check.

The isolation reference differences replay loops (backward = forward+backward − forward). On the
H200 the vit_huge batch-8 forward replayed as fast as inside a step, but the forward+backward
replay did not (results/attr_vith_b8: 128 ms of backward a call against 98 ms in steps, run3).
This script times, with CUDA events around each part (no host synchronization inside a loop),
on one fixed batch:

  step          training steps (data copy, forward, backward, optimizer, EMA);
  fb            the isolation replay: zero_grad(None), forward, backward;
  fb_accumulate forward, backward into existing gradients (the old, biased replay);
  fb_opt        zero_grad(None), forward, backward, optimizer step (no EMA);
  fb_loop       trainer.run_forward_backward in a plain loop, host wall per call (what the
                isolation method measures).

For each: median GPU time of forward and backward, wall time per call, and the allocator's
cudaMalloc/cudaFree counts and retries over the loop (a replay that frees and re-allocates
memory every call would show here). Writes one JSON.

    PYTHONPATH=src python3 benchmarks/replay_fidelity.py --out OUT.json [--preset vit_huge]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def _alloc_counts(dev: torch.device) -> dict[str, int]:
    if dev.type != "cuda":
        return {}
    s = torch.cuda.memory_stats(dev)
    return {
        k: int(s.get(k, 0)) for k in ("num_device_alloc", "num_device_free", "num_alloc_retries")
    }


def _delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b[k] - a[k] for k in a}


class _Timer:
    """CUDA events around named parts of each call (host timestamps on a CPU)."""

    def __init__(self, dev: torch.device) -> None:
        self.cuda = dev.type == "cuda"
        self.marks: list[list[tuple[str, object]]] = []

    def start_call(self) -> None:
        self.marks.append([])

    def mark(self, name: str) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks[-1].append((name, e))
        else:
            self.marks[-1].append((name, time.perf_counter()))

    def medians_ms(self) -> dict[str, float]:
        if self.cuda:
            torch.cuda.synchronize()
        parts: dict[str, list[float]] = {}
        for call in self.marks:
            for (a, ea), (b, eb) in zip(call, call[1:], strict=False):
                ms = ea.elapsed_time(eb) if self.cuda else (eb - ea) * 1e3
                parts.setdefault(f"{a}->{b}", []).append(ms)
        return {k: statistics.median(v) for k, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="vit_huge")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--n", type=int, default=30, help="measured calls per condition")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    from jouleprof.timeline.markers import NullRecorder
    from jouleprof.workloads.vjepa2 import get_preset
    from jouleprof.workloads.vjepa2.collate import make_loader
    from jouleprof.workloads.vjepa2.step import VJepa2Trainer

    dev = torch.device(a.device)
    cfg = get_preset(a.preset, batch_size=a.batch_size, num_workers=0)
    batch = next(iter(make_loader(cfg, "fake", device=dev)))
    t = VJepa2Trainer(cfg, dev, NullRecorder())

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step(tm: _Timer) -> None:
        # train_step's own phases, with marks at the same places (NullRecorder marks nothing).
        tm.start_call()
        tm.mark("start")
        t.optimizer.zero_grad(set_to_none=True)  # as train_step begins
        b = t._fetch(batch)
        tm.mark("data")
        with t._autocast():
            h = t._forward_target(b)
        with t._autocast():
            loss = t._forward_context(b, h)
        tm.mark("forward")
        loss.backward()
        tm.mark("backward")
        t._optimizer_step()
        tm.mark("optimizer")
        t._ema()
        tm.mark("ema")
        t.steps_done += 1

    def fb(tm: _Timer, zero: bool = True, opt: bool = False) -> None:
        tm.start_call()
        tm.mark("start")
        if zero:
            t.optimizer.zero_grad(set_to_none=True)
        tm.mark("zero_grad")
        loss = t._forward(t._replay_batch(None))
        tm.mark("forward")
        loss.backward()
        tm.mark("backward")
        if opt:
            t._optimizer_step()
            tm.mark("optimizer")

    conditions = {
        "step": step,
        "fb": fb,
        "fb_accumulate": lambda tm: fb(tm, zero=False),
        "fb_opt": lambda tm: fb(tm, opt=True),
    }
    results: dict[str, dict] = {
        "preset": a.preset,
        "batch_size": a.batch_size,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "n": a.n,
    }
    # The step first (it also leaves the cached batch the replays use), then each replay.
    for name, fn in conditions.items():
        for _ in range(a.warmup):
            fn(_Timer(dev))
        sync()
        tm = _Timer(dev)
        c0 = _alloc_counts(dev)
        w0 = time.perf_counter()
        for _ in range(a.n):
            fn(tm)
        sync()
        wall_ms = (time.perf_counter() - w0) * 1e3 / a.n
        results[name] = {
            "gpu_ms_median": tm.medians_ms(),
            "wall_ms_per_call": wall_ms,
            "allocator": _delta(c0, _alloc_counts(dev)),
        }
        print(name, json.dumps(results[name]), flush=True)
    for _ in range(a.warmup):
        t.run_forward_backward()
    sync()
    c0 = _alloc_counts(dev)
    w0 = time.perf_counter()
    for _ in range(a.n):
        t.run_forward_backward()
    sync()
    results["fb_loop"] = {
        "wall_ms_per_call": (time.perf_counter() - w0) * 1e3 / a.n,
        "allocator": _delta(c0, _alloc_counts(dev)),
    }
    print("fb_loop", json.dumps(results["fb_loop"]), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
