"""Deployment cost of a trained video classifier, measured in the run's own process.

The protocol is `jouleprof infer`'s clip protocol (`bench.infer.infer_cost`): the input is
prepared on the device first (random normal, not zeros: some kernels are faster on zeros),
warm-up passes, then `deploy_passes` synchronized passes give the latency (mean, p50, p95), and
a sustained loop of ≥ `deploy_sustained_s` gives the energy per clip from the run's energy
counter (its window is costed after the run, with its interval). Before it, the optimizer's
state and the gradients are freed, so the peak allocated memory is that of inference: weights
(with adapters, unmerged) and activations.

A run may instead take the deployment cost another finished run measured (`reusable_deployment`,
`jouleprof run video --deploy-from RUN_DIR`): inference runs the same kernels whatever the
learning rate, seed, epochs or activation checkpointing of training, so runs of one model, method
and precision, at one clip and deployment protocol on the same GPU, have one deployment cost. A
study measures it once per such configuration instead of in every cell.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import Any

WARMUP_PASSES = 5
SAME_DEPLOYMENT = (
    "model",
    "method",
    "precision",
    "tiny",
    "deploy_batch",
    "deploy_passes",
    "deploy_sustained_s",
)
"""The run settings a reused deployment cost must share (with the clip and the GPU)."""
SAME_GPU = ("gpus", "driver_version")
"""The hardware record's parts a reused deployment cost must share."""


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


def reusable_deployment(
    source: str | Path, run: dict[str, Any], clip: dict[str, int], hardware: dict[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    """The deployment record `source` (a finished video run's directory) measured, when this
    run may take it as its own; else None. Returns it (with `reused_from` saying where it was
    measured) or None, and why in either case.

    Args:
        run: this run's settings (`VideoRunConfig.to_json()`).
        clip: this run's clip, {"frames": ..., "size": ...}.
        hardware: this run's hardware record (`hardware.hardware_record`).
    """
    src = Path(os.path.normpath(source))  # a study names it relative to a cell: "cell/../other"
    try:
        d = json.loads((src / "run.json").read_text())
    except (OSError, ValueError) as e:
        return None, f"{src} holds no readable run.json ({type(e).__name__})"
    if d.get("status") != "complete":
        return None, f"{src} is not a complete run (status {d.get('status')})"
    theirs = ((d.get("config") or {}).get("video_run")) or {}
    differ = [k for k in SAME_DEPLOYMENT if theirs.get(k) != run.get(k)]
    dep = ((d.get("extra") or {}).get("video") or {}).get("deployment")
    if not differ and dep and dep.get("clip") != clip:
        differ.append("clip")
    if differ:
        return None, f"{src} ran other settings ({', '.join(differ)})"
    if not dep:
        return None, f"{src} measured no deployment cost"
    if ((dep.get("energy_per_clip") or {}).get("value")) is None:
        return None, f"{src} has no deployment energy (it measured no GPU)"
    other = [k for k in SAME_GPU if (d.get("hardware") or {}).get(k) != hardware.get(k)]
    if other:
        return None, f"{src} ran on other hardware ({', '.join(other)})"
    if (d.get("extra") or {}).get("disturbed"):
        return None, f"{src} was disturbed by another process on its GPU"
    if dep.get("reused_from"):  # a reused cost points at the run that measured it
        return dict(dep), f"as {src} did, from {dep['reused_from']['run_dir']}"
    out = dict(dep)
    out["reused_from"] = {
        "run_dir": str(src),
        "run_id": d.get("run_id"),
        "why": "same model, method, precision, clip and deployment protocol on the same GPU "
        "model and driver: inference runs the same kernels whatever the training's learning "
        "rate, seed, epochs or checkpointing",
    }
    return out, f"measured by {src}"
