"""Deployment cost of a model: latency, energy per clip (or sample) and peak memory of inference.

Protocols (`InferConfig.protocol`):

- clip: the input is prepared on the device first (random normal, never zeros: some kernels
  are faster on zeros), `warmup` passes, then `passes` synchronized passes give the latency
  (mean, p50, p95); then a sustained loop of back-to-back passes for ≥ `sustained_s` (≥ 10 s)
  gives the energy per clip from the energy counter's window over it, with its bounds.
- steady: eval mode, inference_mode, autocast at the precision, 3 warm-ups, then synchronized
  passes for ≥ `sustained_s` (≥ 6 s) give both the latency and the energy:
  J/sample = energy / (passes × batch). The loop is `bench.infer_loop.steady_window`, the one
  the inference predictor's dataset is collected with (benchmarks/predict_collect.py).

`infer_cost(forward, x, m, cfg)` runs a protocol inside an open `jouleprof.measure` and returns
the timings and the window; `finish_cost(run_dir, result)` adds the energies once the run is
closed (its samples are complete then). `run_infer` does both for a model by name.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROTOCOLS = ("clip", "steady")


@dataclass(frozen=True)
class InferConfig:
    """What is timed and how (CLI flags of `jouleprof infer`)."""

    model: str = "hiera-b"
    """A video model name (videomae-b, timesformer-b, swin3d-b, hiera-b) or a zoo spec
    (timm:NAME, torchvision:NAME, hf:NAME, path.py:factory)."""
    weights: str | None = None
    """Local path or hub id of weights (video models); None: random initialization."""
    batch: int = 1
    """Clips (samples) per pass."""
    precision: str = "bf16"
    """fp32, fp16, bf16 (autocast) or int8 (video models: an 8-bit base, bitsandbytes)."""
    protocol: str = "clip"
    """clip or steady (see the module docstring)."""
    warmup: int = 5
    """Warm-up passes (the steady protocol uses 3)."""
    passes: int = 30
    """Synchronized passes timed for the latency (clip protocol)."""
    sustained_s: float | None = None
    """Seconds of the energy loop; None: 10 (clip) or 6 (steady)."""
    num_classes: int = 20
    """Classes of a video model's head."""
    tiny: bool = False
    """A video model's tiny config (CPU tests)."""

    def __post_init__(self) -> None:
        from jouleprof.workloads.video.precision import get_precision

        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"unknown protocol {self.protocol!r}: choose one of {', '.join(PROTOCOLS)}"
            )
        get_precision(self.precision)
        video = _video_names()
        if ":" not in self.model and self.model not in video:
            raise ValueError(
                f"unknown model {self.model!r}: choose a video model ({', '.join(video)}) "
                "or a zoo spec (timm:NAME, torchvision:NAME, hf:NAME, path/to/module.py:factory)"
            )
        if self.batch < 1 or self.passes < 1 or self.warmup < 0 or self.num_classes < 1:
            raise ValueError("batch, passes and num_classes must be ≥ 1 and warmup ≥ 0")
        if self.sustained_s is not None and self.sustained_s <= 0:
            raise ValueError(f"sustained_s must be > 0, got {self.sustained_s}")

    @property
    def loop_s(self) -> float:
        return (
            self.sustained_s
            if self.sustained_s is not None
            else (10.0 if self.protocol == "clip" else 6.0)
        )


def is_video_model(name: str) -> bool:
    from jouleprof.workloads.video.models import MODEL_NAMES

    return name in MODEL_NAMES


def build(cfg: InferConfig, device) -> tuple[Any, Any, dict[str, Any]]:
    """(model in eval mode on `device`, the input batch on `device`, facts of the model)."""
    import torch

    from jouleprof.errors import JouleprofError

    g = torch.Generator(device=device).manual_seed(0)
    if is_video_model(cfg.model):
        from jouleprof.workloads.video.adapt import parameter_counts
        from jouleprof.workloads.video.models import build_model
        from jouleprof.workloads.video.precision import compute_dtype, get_precision
        from jouleprof.workloads.video.quant import quantize_linears

        vc = build_model(cfg.model, cfg.num_classes, weights=cfg.weights, tiny=cfg.tiny)
        facts: dict[str, Any] = {"init": vc.init, "clip": [vc.frames, vc.size]}
        if get_precision(cfg.precision).base_bits == 8:
            facts["quantized_linears"] = quantize_linears(
                vc.net, 8, compute_dtype(cfg.precision), (vc.head_name,)
            )
        model = vc.to(device).eval()
        facts["parameters"] = parameter_counts(model)["total"]
        x = torch.randn(cfg.batch, vc.frames, 3, vc.size, vc.size, device=device, generator=g)
        return model, x, facts
    if cfg.precision == "int8":
        raise ValueError(
            "int8 inference is for the video models (an 8-bit base): use fp32, fp16 or bf16"
        )
    if cfg.tiny:
        raise ValueError("--tiny is for the video models")
    try:
        from jouleprof.workloads.zoo import resolve
    except ImportError as e:
        raise JouleprofError(
            f"model {cfg.model!r} is not a video model ({', '.join(_video_names())}) and the "
            f"model zoo (jouleprof.workloads.zoo) is not available: {e}"
        ) from e
    if cfg.weights is not None:
        raise ValueError("--weights is for the video models; zoo models are randomly initialized")
    from jouleprof.bench.infer_loop import random_input

    zm = resolve(cfg.model)
    model = zm.factory().to(device).eval()
    facts = {
        "init": {"weights": None, "source": "random", "note": f"zoo {zm.source}"},
        "input_shape": list(zm.input_shape),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    x = random_input(cfg.batch, tuple(zm.input_shape), device)
    return model, x, facts


def _video_names() -> list[str]:
    from jouleprof.workloads.video.models import model_names

    return model_names()


def _stats(times_s: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(times_s)
    return {
        "latency_s_mean": float(a.mean()),
        "latency_s_p50": float(np.percentile(a, 50)),
        "latency_s_p95": float(np.percentile(a, 95)),
        "latency_passes": int(a.size),
    }


def infer_cost(forward, x, m, cfg: InferConfig, on_stage=None) -> dict[str, Any]:
    """Run the protocol on `forward(x)` inside the open measurement `m` (None: timings only).

    `on_stage(text)`, where given, is told each stage and pass as it starts (a terminal's
    progress line). The steady protocol is `bench.infer_loop.steady_window`, the loop the
    inference predictor's dataset was measured with."""
    import torch

    from jouleprof.bench.infer_loop import (
        device_sync,
        inference_context,
        measurement_edges,
        reset_device,
        steady_window,
    )

    device = x.device
    cuda = device.type == "cuda"
    sync = device_sync(device)
    now, dense = measurement_edges(m)

    stage = on_stage or (lambda _text: None)
    out: dict[str, Any] = {"protocol": cfg.protocol, "batch": int(x.shape[0])}
    with inference_context(cfg.precision, device):
        if cfg.protocol == "steady":
            stage(f"steady loop of {cfg.loop_s:g} s")
            w = steady_window(forward, x, precision=cfg.precision, window_s=cfg.loop_s, now=now,
                              on_edge=dense)  # fmt: skip
            t0, t1, n = w.t0_s, w.t1_s, w.passes
            out.update(_stats(list(w.pass_times_s)))
        else:
            reset_device(device)
            for i in range(cfg.warmup):
                stage(f"warm-up pass {i + 1}/{cfg.warmup}")
                forward(x)
            sync()
            times = []
            for i in range(cfg.passes):
                stage(f"latency pass {i + 1}/{cfg.passes}")
                t = time.perf_counter()
                forward(x)
                sync()
                times.append(time.perf_counter() - t)
            out.update(_stats(times))
            dense()
            stage(f"energy loop of {cfg.loop_s:g} s")
            t0 = now()
            h0 = time.perf_counter()
            n = shown_s = 0
            while True:
                forward(x)
                n += 1
                if n % 4 == 0 or n == 1:  # check the host clock without syncing every pass
                    sync()
                    elapsed_s = time.perf_counter() - h0
                    if elapsed_s >= cfg.loop_s:
                        break
                    if int(elapsed_s) > shown_s:  # the line moves once a second, not per pass
                        shown_s = int(elapsed_s)
                        stage(f"energy loop {shown_s}/{cfg.loop_s:g} s, {n} passes")
            sync()
            t1 = now()
            dense()
    out.update(window_t0_s=t0, window_t1_s=t1, window_passes=n, window_s=t1 - t0)
    out["peak_mem_mib"] = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
    return out


def finish_cost(run_dir: str | Path, result: dict[str, Any]) -> dict[str, Any]:
    """Add the energy of the result's window (from the closed run's samples): energy_j with
    bounds, J per pass, J per clip/sample, mean power."""
    from jouleprof.bench.probe_cell import segment_energy

    e = segment_energy(Path(run_dir), result["window_t0_s"], result["window_t1_s"])
    n, b = result["window_passes"], result["batch"]
    r = dict(result)
    r["energy_note"] = e["note"]
    if e["energy_j"] is None:
        r.update(
            {
                k: None
                for k in (
                    "energy_j",
                    "energy_j_lo",
                    "energy_j_hi",
                    "j_per_pass",
                    "j_per_clip",
                    "j_per_clip_lo",
                    "j_per_clip_hi",
                    "power_w",
                )
            }
        )
        return r
    r.update(
        energy_j=e["energy_j"],
        energy_j_lo=e["lo_j"],
        energy_j_hi=e["hi_j"],
        j_per_pass=e["energy_j"] / n,
        j_per_clip=e["energy_j"] / (n * b),
        j_per_clip_lo=e["lo_j"] / (n * b),
        j_per_clip_hi=e["hi_j"] / (n * b),
        power_w=e["energy_j"] / result["window_s"] if result["window_s"] > 0 else None,
    )
    return r


def run_infer(cfg: InferConfig, out: str | Path, on_stage=None) -> dict[str, Any]:
    """Build the model, run the protocol under `jouleprof.measure` into run directory `out`;
    returns the result (also in run.json extra["inference"]). `on_stage` as in `infer_cost`."""
    import torch

    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.store.rundir import RunDir

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(out)
    mcfg = MeasureConfig(
        gpus=(0,) if device.type == "cuda" else None,
        idle_s=1.0,
        counter_interval_s=0.1,
        counter_dense_s=0.0,
        rapl=False,
        kind="infer",
    )
    with measure(out, mcfg, run_config={"infer": asdict(cfg)}) as m:
        t = time.perf_counter()
        if on_stage is not None:
            on_stage(f"building {cfg.model} on {device.type}")
        model, x, facts = build(cfg, device)
        facts["build_s"] = round(time.perf_counter() - t, 3)
        res = infer_cost(model, x, m, cfg, on_stage=on_stage)
        res["facts"] = facts
        m.record.extra["inference_raw"] = res
    res = finish_cost(out, res)
    rd = RunDir(out)
    rec = rd.read_record()
    rec.extra["inference"] = res
    rd.write_record(rec)
    return res
