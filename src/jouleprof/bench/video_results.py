"""A video run's figures from its recorded files alone: costs, attribution, scores.

`finish_video_run(run_dir)` reads run.json (the windows `video_run` recorded in
extra["video"]) and samples.csv, and writes back: each window's energy with its interval,
the adaptation cost (training), the validation/test metrics and their cost, the deployment cost,
the per-phase split of training (proportional attribution), and NetScore, NS_E, NS_M, NS# with
their intervals (`scores.intervals`). Rerunnable on a copied run directory.

Two sets of score inputs are kept:

- ``deploy`` (the headline): t the latency of one synchronized inference pass, P the mean power
  of the sustained inference loop, r its peak allocated memory: what the deployed model costs
  (a deployment taken from another run, `reused_from`, keeps the figures that run costed);
- ``validation_pass``: t the validation pass's seconds, P its mean power, r the peak allocated
  memory of training — the definition some earlier PEFT benchmarks used; it depends on the
  validation set's size, so it compares runs on one dataset only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jouleprof.scores.costs import WindowCoster, exact, scaled, summed
from jouleprof.scores.intervals import Bounded, all_scores, as_figure
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure

log = logging.getLogger(__name__)
MIB = 2**20


def _mib(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / MIB


def _mem_input(nbytes: int | None, why: str) -> Figure:
    if nbytes is None:
        return Figure.unavailable("MiB", why)
    return Figure.measured(nbytes / MIB, "MiB", signal="torch.cuda.max_memory_allocated")


def _no_energy_reason(rec) -> str:
    f = rec.summary.get("gpu_energy_j")
    if f is not None and f.reason:
        return f.reason
    return "no GPU was measured"


def _samples(rd: RunDir):
    try:
        df = rd.read_samples()
    except Exception as e:  # an empty samples.csv on a machine with no sensor
        log.debug("no samples: %s", e)
        return None, []
    return df, sorted(df["device"].unique()) if len(df) else []


def _phases(rd: RunDir, devices: list[str]) -> dict[str, Any]:
    """Training energy per phase (proportional attribution), or why not."""
    if not devices:
        return {"available": False, "reason": "no GPU energy was recorded"}
    try:
        from jouleprof.attribution import attribute

        res = attribute(rd.path, "proportional", device=devices[0] if len(devices) == 1 else None)
    except Exception as e:
        return {"available": False, "reason": f"{type(e).__name__}: {e}"}
    rows = res.total
    return {
        "available": True,
        "method": res.method,
        "phases": [
            {
                k: getattr(p, k)
                for k in (
                    "phase",
                    "time_s",
                    "energy_j",
                    "energy_lo_j",
                    "energy_hi_j",
                    "mean_power_w",
                    "share_pct",
                    "note",
                )
            }
            for p in rows
        ],
    }


def _eval_block(ev: dict[str, Any], coster: WindowCoster) -> dict[str, Any]:
    e = coster.energy(ev["t0_s"], ev["t1_s"])
    ev["energy"] = e.to_json()
    ev["power"] = scaled(e, 1 / ev["time_s"] if ev["time_s"] > 0 else 0, "W", "power").to_json()
    return ev


def finish_video_run(run_dir: str | Path) -> dict[str, Any]:
    """Computes and stores the run's costs and scores; returns extra["video"]."""
    rd = RunDir(run_dir)
    rec = rd.read_record()
    video = rec.extra.get("video") or {}
    samples, devices = _samples(rd)
    coster = WindowCoster(samples, devices, _no_energy_reason(rec))
    epochs = video.get("epochs") or []
    train_e = []
    for ep in epochs:
        tr = ep["train"]
        e = coster.energy(tr["t0_s"], tr["t1_s"])
        tr["energy"] = e.to_json()
        train_e.append(e)
        _eval_block(ep["val"], coster)
    peaks = [ep["train"].get("peak_mem_allocated_bytes") for ep in epochs]
    peak_train = max(peaks) if peaks and None not in peaks else None
    train_time = sum(ep["train"]["time_s"] for ep in epochs)
    train_clips = sum(ep["train"]["clips"] for ep in epochs)
    train_energy = summed(train_e)
    facts = video.get("facts") or {}
    no_mem = "peak allocated memory is read on CUDA devices only"
    adaptation = {
        "epochs": len(epochs),
        "steps": sum(ep["train"]["steps"] for ep in epochs),
        "clips": train_clips,
        "time_s": train_time,
        "energy": train_energy.to_json(),
        "energy_per_clip": scaled(train_energy, 1 / max(train_clips, 1), "J", "per clip").to_json(),
        "power": scaled(train_energy, 1 / train_time if train_time else 0, "W", "power").to_json(),
        "peak_mem_allocated_mib": _mib(peak_train),
        "trainable_params": (facts.get("parameters") or {}).get("trainable"),
        "total_params": (facts.get("parameters") or {}).get("total"),
        "phases": _phases(rd, coster.devices),
    }
    video["adaptation"] = adaptation
    last_val = epochs[-1]["val"] if epochs else None
    if "test" in video:
        _eval_block(video["test"], coster)
    dep = video.get("deployment")
    deploy_inputs: dict[str, Any] = {}
    if dep and dep.get("reused_from"):
        # Measured (and costed) by the run it names: its window lies on that run's clock.
        power = Figure.from_json(dep["power"])
    elif dep:
        s = dep["sustained"]
        e = coster.energy(s["t0_s"], s["t1_s"])
        clips = s["passes"] * dep["batch"]
        dep["energy"] = e.to_json()
        dep["energy_per_clip"] = scaled(e, 1 / clips if clips else 0, "J", "per clip").to_json()
        power = scaled(e, 1 / s["time_s"] if s["time_s"] > 0 else 0, "W", "power")
        dep["power"] = power.to_json()
    if dep:
        lat = Bounded(dep["latency_s_mean"], dep["latency_s_lo"], dep["latency_s_hi"])
        deploy_inputs = {
            "time_s": lat,
            "power_w": power,
            "memory_mib": _mem_input(dep.get("peak_mem_allocated_bytes"), no_mem),
            "params_m": (dep.get("params") or {}).get("total", 0) / 1e6 or None,
            "macs_g": None if dep.get("macs_per_clip") is None else dep["macs_per_clip"] / 1e9,
        }
    acc = last_val["top1_pct"] if last_val else None
    n_val = last_val["clips"] if last_val else None
    scores = {"deploy": all_scores(acc, n_val, deploy_inputs)}
    if last_val:
        vp = Figure.from_json(last_val["power"])
        scores["validation_pass"] = all_scores(
            acc,
            n_val,
            {
                "time_s": last_val["time_s"],
                "power_w": vp if vp.value is not None else None,
                "memory_mib": _mib(peak_train),
            },
        )
    video["scores"] = scores
    rec.extra["video"] = video
    env = {
        "disturbed": rec.extra.get("disturbed"),
        "gpu_sharing": rec.extra.get("gpu_sharing"),
        "idle_power_w": {
            d: rec.summary[f"{d}.idle_power_w"].to_json()
            for d in coster.devices
            if f"{d}.idle_power_w" in rec.summary
        },
    }
    video["environment"] = env
    summary = dict(rec.summary)
    summary.update(_flat(video, adaptation, last_val, no_mem))
    rec.summary = summary
    rd.write_record(rec)
    return video


def _flat(video, adaptation, last_val, no_mem) -> dict[str, Figure]:
    """The summary figures runs.csv shows, one value each (run.json keeps their sources)."""
    out: dict[str, Figure] = {}
    if last_val:
        out["val_top1_pct"] = exact(last_val["top1_pct"], "%", "validation", "no validation clip")
        out["val_time_s"] = exact(last_val["time_s"], "s", "timer", "")
        out["val_energy_j"] = Figure.from_json(last_val["energy"])
    if "test" in video:
        out["test_top1_pct"] = exact(video["test"]["top1_pct"], "%", "test", "no test clip")
    out["train_time_s"] = exact(adaptation["time_s"], "s", "timer", "")
    out["train_energy_j"] = Figure.from_json(adaptation["energy"])
    out["train_energy_per_clip_j"] = Figure.from_json(adaptation["energy_per_clip"])
    out["train_peak_mem_mib"] = exact(adaptation["peak_mem_allocated_mib"], "MiB", "torch", no_mem)
    if adaptation.get("trainable_params") is not None:
        out["trainable_params"] = exact(adaptation["trainable_params"], "params", "count", "")
    dep = video.get("deployment")
    if dep:
        out["deploy_latency_s"] = Figure.measured(
            dep["latency_s_mean"],
            "s",
            signal="timer",
            lo=dep["latency_s_lo"],
            hi=dep["latency_s_hi"],
        )
        out["deploy_energy_per_clip_j"] = Figure.from_json(dep["energy_per_clip"])
        out["deploy_power_w"] = Figure.from_json(dep["power"])
        out["deploy_peak_mem_mib"] = exact(
            _mib(dep.get("peak_mem_allocated_bytes")), "MiB", "torch", no_mem
        )
    for name, s in video["scores"]["deploy"].items():
        out[name] = as_figure(s)
    return out
