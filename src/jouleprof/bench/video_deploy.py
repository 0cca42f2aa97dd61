"""Deployment cost of a trained video classifier, measured in the run's own process.

The protocol (the issue's `infer`): the input is prepared on the device first (random normal,
not zeros: some kernels are faster on zeros), warm-up passes, then `deploy_passes` synchronized
passes give the latency (mean, p50, p95), and a sustained loop of ≥ `deploy_sustained_s` gives
the energy per clip from the run's energy counter (its window is costed after the run, with its
interval). Before it, the optimizer's state and the gradients are freed, so the peak allocated
memory is that of inference: weights (with adapters, unmerged) and activations.
"""

from __future__ import annotations

import gc
import time
from typing import Any

WARMUP_PASSES = 5
EDGE_DENSE_S = 1.0


def _count_macs(torch, fn) -> tuple[float | None, str]:
    """Multiply-accumulates of one pass (FlopCounterMode FLOPs / 2), or None and why."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as fc:
            fn()
        flops = fc.get_total_flops()
    except Exception as e:  # counting is best effort: a kernel it cannot trace is no failure
        return None, f"FLOP counting failed ({type(e).__name__}: {e})"
    if not flops:
        return None, "FlopCounterMode counted no FLOPs (custom kernels)"
    return flops / 2.0, "counted (torch FlopCounterMode: matmuls, convolutions, attention)"


def deployment_cost(torch, trainer, cfg, spec, device, m) -> dict[str, Any]:
    """Latency, the sustained loop's window, peak memory and MACs of the trained model."""
    from jouleprof.workloads.video.adapt import parameter_counts

    frames, size = trainer.cfg.clip
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.optimizer = None  # its state is not part of a deployed model
    gc.collect()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    g = torch.Generator(device=device).manual_seed(cfg.seed)
    x = torch.randn((cfg.deploy_batch, frames, 3, size, size), generator=g, device=device)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def fwd():
        return trainer.eval_logits(x)

    for _ in range(WARMUP_PASSES):
        fwd()
    sync()
    lat = []
    for _ in range(cfg.deploy_passes):
        t = time.perf_counter()
        fwd()
        sync()
        lat.append(time.perf_counter() - t)
    if m.sampler.devices:
        m.sampler.densify(EDGE_DENSE_S, read_now=True)
    sync()
    t0 = m.clock.now_s()
    t_start = time.perf_counter()
    passes = 0
    while time.perf_counter() - t_start < cfg.deploy_sustained_s:
        for _ in range(8):  # launch a few passes between clock checks
            fwd()
        passes += 8
        sync()
    t1 = m.clock.now_s()
    if m.sampler.devices:
        m.sampler.densify(EDGE_DENSE_S, read_now=True)
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None
    macs, macs_how = _count_macs(torch, lambda: trainer.eval_logits(x[:1]))
    import numpy as np

    arr = np.asarray(lat)
    half = 1.96 * float(arr.std(ddof=1)) / np.sqrt(len(arr)) if len(arr) > 1 else 0.0
    return {
        "batch": cfg.deploy_batch,
        "clip": {"frames": frames, "size": size},
        "input": "random normal, prepared on the device",
        "warmup_passes": WARMUP_PASSES,
        "timed_passes": len(lat),
        "latency_s_mean": float(arr.mean()),
        "latency_s_p50": float(np.percentile(arr, 50)),
        "latency_s_p95": float(np.percentile(arr, 95)),
        "latency_s_lo": max(float(arr.mean()) - half, float(arr.min())),
        "latency_s_hi": float(arr.mean()) + half,
        "sustained": {"t0_s": t0, "t1_s": t1, "time_s": t1 - t0, "passes": passes},
        "peak_mem_allocated_bytes": peak,
        "params": parameter_counts(trainer.model),
        "macs_per_clip": None if macs is None else macs / 1.0,
        "macs_how": macs_how,
    }
