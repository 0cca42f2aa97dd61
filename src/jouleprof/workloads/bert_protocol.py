"""The measured BERT protocol: warm-up, synced steps for ≥ 6 s, energy summed over the GPUs.

`run_protocol(cfg, out)` writes one run directory (run.json, samples.csv, per-rank directories
under torchrun) whose summary holds j_per_step, s_per_step, j_per_sample, steps and peak memory.
One process per GPU: under torchrun every rank runs it, measures its own GPU, and rank 0 writes
the reduced figures (jouleprof.distributed). An out-of-memory error is a result: run.json is
marked failed with extra.oom = true.

    python -m jouleprof.workloads.bert_protocol --layers 12 --hidden 768 --heads 12 \\
        --seq 128 --batch 32 --out runs/bert-base
    torchrun --nproc-per-node 2 -m jouleprof.workloads.bert_protocol --strategy ddp ... --out D
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from jouleprof.distributed.comm import CommRecorder
from jouleprof.workloads.bert import BertSession, BertTrainConfig, is_oom

EXIT_OOM = 3


def _device(ctx, cfg: BertTrainConfig):
    import torch

    if torch.cuda.is_available():
        from jouleprof.distributed.context import rank_gpu

        idx = rank_gpu(ctx, torch.cuda.device_count()) if ctx is not None else 0
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def _energy_of(summary: dict, devices: list[str]) -> tuple[float | None, str]:
    """Whole-board energy over the measured segment, summed over the measured GPUs."""
    if "gpu_energy_j" in summary and summary["gpu_energy_j"].value is not None:
        return summary["gpu_energy_j"].value, summary["gpu_energy_j"].signal or "counter"
    vals = [summary.get(f"{d}.energy_j") for d in devices if d.startswith(("gpu", "sim"))]
    if vals and all(v is not None and v.value is not None for v in vals):
        return sum(v.value for v in vals), "+".join(sorted({v.signal or "" for v in vals}))
    return None, "no GPU energy was measured"


def _steps_loop(session: BertSession, cfg: BertTrainConfig, ctx, agree) -> list[float]:
    """Synced steps until ≥ min_measure_s and ≥ min_steps on every rank (all ranks run
    the same number of steps: their collectives must pair)."""
    times: list[float] = []
    t0 = time.perf_counter()
    chunk = cfg.min_steps
    while True:
        for _ in range(chunk):
            times.append(session.step(sync=True))
        elapsed = agree(time.perf_counter() - t0, "min")
        if elapsed >= cfg.min_measure_s and len(times) >= cfg.min_steps:
            return times
        per_step = elapsed / len(times)
        chunk = max(1, math.ceil((cfg.min_measure_s - elapsed) / per_step * 1.02))


def run_protocol(
    cfg: BertTrainConfig,
    out: str | Path,
    *,
    simulate_gpu_w: float | None = None,
    measure_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the protocol for `cfg` into the run directory `out`; returns the figures written.

    Raises:
        JouleprofError/ValueError: a bad configuration (before any GPU work).
    """
    from jouleprof.distributed import context as dctx
    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.types import Figure
    from jouleprof.workloads import bert_strategies as strat

    out = Path(out)
    ctx = dctx.current()
    strat.check_before_gpu_work(cfg, ctx)
    device = _device(ctx, cfg)
    group = strat.init_distributed(cfg, ctx, device)
    try:
        strat.check_ranks_agree(cfg, group)
        agree = strat.agreement(group)
        comm = CommRecorder()
        try:
            session = BertSession(
                cfg,
                device,
                wrap=strat.wrapper(cfg, group, device),
                data_seed=strat.data_seed(cfg, group),
            )
            comm.attach(session.model)
            for _ in range(cfg.warmup_steps):
                session.step(sync=True)
            if device.type == "cuda":
                import torch

                torch.cuda.reset_peak_memory_stats(device)
        except Exception as e:
            if is_oom(e):
                return _write_oom(out, cfg, ctx, e)
            raise
        gpus = (device.index,) if device.type == "cuda" else ()
        mcfg = MeasureConfig(
            gpus=gpus,
            idle_s=0.0,
            kind="bert",
            interval_s=0.02,
            counter_interval_s=0.1,
            rapl=False,
            simulate_gpu_w=simulate_gpu_w,
            **(measure_overrides or {}),
        )
        strat.barrier(group)
        oom = None
        with measure(out, mcfg, run_config={"bert": cfg.to_json()}) as m:
            comm.clear()
            try:
                with comm.patch():
                    times = _steps_loop(session, cfg, ctx, agree)
            except Exception as e:
                if not is_oom(e):
                    raise
                oom = e
            if group is not None:
                comm.finish(m)
        if oom is not None:
            return _write_oom(out, cfg, ctx, oom, rundir_exists=True)
        peak = session.peak_memory_bytes()
        peak = int(agree(float(peak), "max")) if peak is not None else None
        facts = session.facts()
        session.close()
        rec_dir = m.extra.get("combined_dir") or m.run_dir.path
        if ctx is not None and not ctx.is_main:
            return {}
        from jouleprof.store.rundir import RunDir

        rd = RunDir(rec_dir)
        rec = rd.read_record()
        devices = [d for d in m.devices] if ctx is None else []
        energy, signal = _energy_of(rec.summary, devices)
        n = len(times)
        world = ctx.world_size if ctx is not None else 1
        samples = n * cfg.batch * (1 if cfg.strategy == "tp" else world)
        wall = rec.summary["wall_time_s"].value
        s = rec.summary
        s["steps"] = Figure.measured(n, "steps", signal="counter of steps")
        s["s_per_step"] = Figure.measured(wall / n, "s", signal="timer")
        s["samples"] = Figure.measured(samples, "samples", signal="counter of steps")
        if energy is not None:
            s["energy_j"] = Figure.measured(energy, "J", signal=signal)
            s["j_per_step"] = Figure.measured(energy / n, "J", signal=signal)
            s["j_per_sample"] = Figure.measured(energy / samples, "J", signal=signal)
            s["avg_power_w"] = Figure.measured(energy / wall, "W", signal=signal)
        else:
            for k in ("energy_j", "j_per_step", "j_per_sample"):
                s[k] = Figure.unavailable("J", signal)
        s["peak_mem_allocated_bytes"] = (
            Figure.measured(peak, "B", signal="torch.cuda.max_memory_allocated")
            if peak is not None
            else Figure.unavailable("B", "not on a CUDA device")
        )
        s["train_flops_per_step"] = Figure.estimated(
            facts["train_flops_per_step"] * (1 if cfg.strategy == "tp" else world),
            "FLOP",
            reason="analytic count (predict.train_features)",
        )
        rec.extra["bert"] = {
            **facts,
            "step_times_s": [round(t, 6) for t in times],
            "world_size": world,
            "device": str(device),
        }
        rd.write_record(rec)
        return {k: f.value for k, f in s.items() if k in _FIGURES}
    finally:
        strat.destroy(group)


_FIGURES = (
    "steps",
    "s_per_step",
    "energy_j",
    "j_per_step",
    "j_per_sample",
    "avg_power_w",
    "peak_mem_allocated_bytes",
    "samples",
    "wall_time_s",
    "train_flops_per_step",
)


def _write_oom(
    out: Path, cfg: BertTrainConfig, ctx, exc: BaseException, rundir_exists: bool = False
) -> dict[str, Any]:
    """An out-of-memory result: run.json status failed, extra.oom true."""
    from jouleprof.store.rundir import RunDir, new_run_id
    from jouleprof.types import RunRecord, RunStatus

    if ctx is not None and not ctx.is_main:
        return {"oom": True}
    rd = RunDir(out)
    if rundir_exists and (out / "run.json").exists():
        rec = rd.read_record()
    else:
        rec = RunRecord(run_id=new_run_id("bert"), kind="bert", config={"bert": cfg.to_json()})
        out.mkdir(parents=True, exist_ok=True)
    rec.status = RunStatus.FAILED
    rec.extra["oom"] = True
    rec.notes.append(f"out of memory: {str(exc).splitlines()[0][:300]}")
    rd.write_record(rec)
    return {"oom": True}


def parse_args(argv: list[str] | None) -> tuple[BertTrainConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(
        prog="python -m jouleprof.workloads.bert_protocol",
        description="One BERT masked-LM configuration, measured.",
    )
    for f in fields(BertTrainConfig):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument(
        "--simulate-gpu-w",
        type=float,
        default=None,
        help="testing aid: also measure a simulated GPU drawing this power",
    )
    a = p.parse_args(argv)
    kw = {f.name: getattr(a, f.name) for f in fields(BertTrainConfig)}
    return BertTrainConfig(**kw), a


def main(argv: list[str] | None = None) -> int:
    from jouleprof.errors import JouleprofError

    try:
        cfg, a = parse_args(argv)
        res = run_protocol(cfg, a.out, simulate_gpu_w=a.simulate_gpu_w)
    except (ValueError, JouleprofError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if res:
        print(json.dumps(res))
    return EXIT_OOM if res.get("oom") else 0


if __name__ == "__main__":
    sys.exit(main())
