"""Deployment cost of a trained video classifier, measured in the run's own process.

The protocol is `jouleprof infer`'s clip protocol (`bench.infer.infer_cost`): the input is
prepared on the device first (random normal, not zeros: some kernels are faster on zeros),
warm-up passes, then `deploy_passes` synchronized passes give the latency (mean, p50, p95), and
a sustained loop of ≥ `deploy_sustained_s` gives the energy per clip from the run's energy
counter (its window is costed after the run, with its interval). Before it, the optimizer's
state and the gradients are freed, so the peak allocated memory is that of inference: weights
(with adapters, unmerged) and activations.
"""

from __future__ import annotations

import gc
from typing import Any

WARMUP_PASSES = 5


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
    """Latency, the sustained loop's window, peak memory and MACs of the trained model, by the
    clip protocol of `jouleprof infer` (`bench.infer.infer_cost`)."""
    from jouleprof.bench.infer import InferConfig, infer_cost
    from jouleprof.workloads.video.adapt import parameter_counts

    frames, size = trainer.cfg.clip
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.optimizer = None  # its state is not part of a deployed model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    g = torch.Generator(device=device).manual_seed(cfg.seed)
    x = torch.randn((cfg.deploy_batch, frames, 3, size, size), generator=g, device=device)
    icfg = InferConfig(
        model=cfg.model,
        batch=cfg.deploy_batch,
        precision=cfg.precision,
        protocol="clip",
        warmup=WARMUP_PASSES,
        passes=cfg.deploy_passes,
        sustained_s=cfg.deploy_sustained_s,
    )
    model = trainer.model
    was = model.training
    model.eval()
    try:
        res = infer_cost(model, x, m, icfg)
    finally:
        model.train(was)
    macs, macs_how = _count_macs(torch, lambda: trainer.eval_logits(x[:1]))
    mean = res["latency_s_mean"]
    # The latency's interval spans the mean of the synchronized passes and the time per pass
    # of the back-to-back loop: a deployment's latency lies between the two.
    loop = res["window_s"] / res["window_passes"] if res["window_passes"] else mean
    peak = res.get("peak_mem_mib")
    return {
        "protocol": "clip (bench.infer.infer_cost)",
        "batch": cfg.deploy_batch,
        "clip": {"frames": frames, "size": size},
        "input": "random normal, prepared on the device",
        "warmup_passes": WARMUP_PASSES,
        "timed_passes": res["latency_passes"],
        "latency_s_mean": mean,
        "latency_s_p50": res["latency_s_p50"],
        "latency_s_p95": res["latency_s_p95"],
        "latency_s_loop": loop,
        "latency_s_lo": min(mean, loop),
        "latency_s_hi": max(mean, loop),
        "sustained": {
            "t0_s": res["window_t0_s"],
            "t1_s": res["window_t1_s"],
            "time_s": res["window_s"],
            "passes": res["window_passes"],
        },
        "peak_mem_allocated_bytes": None if peak is None else round(peak * 2**20),
        "params": parameter_counts(model),
        "macs_per_clip": macs,
        "macs_how": macs_how,
    }
