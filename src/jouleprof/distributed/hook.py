"""The hook `measure()` (and so `jouleprof measure`, `jouleprof.profile` and the BERT protocol)
calls to be rank-aware under torchrun.

Outside torchrun (or with a world of one) `rank_plan` returns None and nothing changes. Under
torchrun every rank:

1. measures into OUT/ranks/rank<k>/ (a full run directory), only the GPU it computes on
   (its local rank, or the GPUs it was told to measure), and local rank 0 also the visible GPUs
   no local rank computes on (reported as allocated but idle);
2. at the end writes OUT/ranks/rank<k>/rank_report.json: its work interval and each measured
   device's physical key (host + PCI bus id) and energy;
3. rank 0 waits for every rank's report (JOULEPROF_RANK_WAIT_S, default 120 s) and writes
   OUT/run.json: the reduction of `distributed.reduce` (energy summed over physical GPUs, each
   counted once; time as the slowest rank; per-rank figures; idle GPUs), with the ranks that
   never reported named.

OUT is the same for every rank: given, or jouleprof-runs/<kind>-<job id> when not.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jouleprof.distributed.context import (
    SIM_GPUS_ENV,
    RankContext,
    current,
    rank_gpu,
    visible_gpu_count,
)

RANK_REPORT = "rank_report.json"
WAIT_ENV = "JOULEPROF_RANK_WAIT_S"


@dataclass
class RankPlan:
    """What this rank measures and where it writes."""

    ctx: RankContext
    combined: Path
    """The job's run directory (rank 0 writes the reduced run.json there)."""
    path: Path
    """This rank's own run directory."""
    config: Any
    """This rank's MeasureConfig."""
    assigned: tuple[int, ...]
    """Visible indices of the GPUs this rank computes on."""
    unassigned: tuple[int, ...]
    """Visible GPUs no local rank computes on (measured by local rank 0 only)."""
    simulated: bool = False
    identities: dict[int, dict[str, object]] = field(default_factory=dict)

    def sensors(self, clock) -> list:
        """Extra sensors: simulated boards when JOULEPROF_SIM_GPUS is set."""
        if not self.simulated:
            return []
        from jouleprof.distributed.simgpu import simulated_board

        out = [simulated_board(i, True, clock, seed=100 + i) for i in self.assigned]
        out += [simulated_board(i, False, clock, seed=100 + i) for i in self.unassigned]
        return out

    def finish(self, m) -> None:
        """Write this rank's report; on rank 0 gather every report and write the job's record.
        Never raises: the ranks' own run directories are the data, the reduction is derived."""
        try:
            report = rank_report(self, m)
            _atomic_json(self.path / RANK_REPORT, report)
            m.extra["combined_dir"] = self.combined
            if self.ctx.is_main:
                write_combined(self, m.record)
        except Exception as e:  # keep the rank's own data whatever happens here
            m.record.notes.append(f"cross-rank reduction failed ({type(e).__name__}: {e})")
            m.run_dir.write_record(m.record)


def rank_plan(out, path: Path, cfg) -> RankPlan | None:
    """This rank's plan under torchrun; None outside it. `out` is what the caller passed,
    `path` the directory measure() would use alone."""
    ctx = current()
    if ctx is None:
        return None
    from jouleprof.measurement import DEFAULT_RUNS_DIR

    combined = Path(out) if out is not None else Path(DEFAULT_RUNS_DIR) / f"{cfg.kind}-{ctx.job_id}"
    simulated = bool(os.environ.get(SIM_GPUS_ENV))
    n = visible_gpu_count()
    if cfg.gpus is not None:
        assigned, unassigned = tuple(cfg.gpus), ()
    elif n:
        assigned = (rank_gpu(ctx, n),)
        unassigned = tuple(range(ctx.local_world_size, n)) if ctx.is_local_main else ()
    else:
        assigned, unassigned = (), ()
    gpus = () if simulated else assigned + unassigned
    rcfg = replace(cfg, gpus=gpus)
    return RankPlan(
        ctx, combined, combined / "ranks" / f"rank{ctx.rank}", rcfg, assigned, unassigned, simulated
    )


def rank_report(plan: RankPlan, m) -> dict[str, Any]:
    """This rank's figures for the reduction (pure but for NVML's PCI ids)."""
    from jouleprof.distributed.identity import device_key, nvml_identities

    ctx = plan.ctx
    summ = m.record.summary
    idx_of = {}
    for i in plan.assigned + plan.unassigned:
        idx_of[f"simgpu{i}" if plan.simulated else f"gpu{i}"] = i
    ids = {} if plan.simulated else nvml_identities(plan.assigned + plan.unassigned)
    devices = []
    for d in m.devices:
        if not d.startswith(("gpu", "sim")):
            continue
        i = idx_of.get(d)
        info = dict(ids.get(i, {})) if i is not None else {}
        if plan.simulated and i is not None:
            info["sim_index"] = i
        if d == "sim0" and not plan.simulated:  # measure(simulate_gpu_w=...): one per rank's GPU
            info["sim_index"] = rank_gpu(ctx, None)
        e = summ.get(f"{d}.energy_j")
        util = _util_max(m, d)
        devices.append(
            {
                "device": d,
                "key": device_key(ctx.host, d, info, ctx.rank),
                "identity": info,
                "assigned": i is None or i in plan.assigned,
                "energy_j": e.value if e is not None else None,
                "lo_j": e.lo if e is not None else None,
                "hi_j": e.hi if e is not None else None,
                "signal": e.signal if e is not None else None,
                "avg_power_w": _val(summ.get(f"{d}.avg_power_w")),
                "util_max_pct": util,
            }
        )
    wall = summ.get("wall_time_s")
    return {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "world_size": ctx.world_size,
        "host": ctx.host,
        "job_id": ctx.job_id,
        "run_dir": str(plan.path),
        "status": m.record.status.value,
        "wall_time_s": _val(wall),
        "work_interval_s": m.record.extra.get("work_interval_s"),
        "devices": devices,
    }


def write_combined(plan: RankPlan, rank0_record) -> Path:
    """Rank 0: wait for the reports, reduce them, write the job's run.json."""
    from jouleprof.distributed.reduce import reduce_reports
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import Figure, RunRecord, RunStatus

    ctx = plan.ctx
    wait_s = float(os.environ.get(WAIT_ENV, "120"))
    reports = _gather(plan.combined / "ranks", ctx.world_size, wait_s)
    red = reduce_reports(reports, ctx.world_size)
    rec = RunRecord(
        run_id=f"{rank0_record.run_id}-job",
        kind=rank0_record.kind,
        config=rank0_record.config,
        hardware=rank0_record.hardware,
        environment=rank0_record.environment,
        git=rank0_record.git,
    )
    rec.extra["distributed"] = red
    rec.notes.append(
        f"{ctx.world_size} ranks; each rank's own run directory is under ranks/ "
        "(samples.csv, spans.csv there); figures here are their reduction"
    )
    statuses = {r.get("status") for r in reports}
    if red["missing_ranks"]:
        rec.notes.append(
            f"ranks {red['missing_ranks']} left no report within {wait_s:g} s: "
            "the totals cover the others only"
        )
    if red["shared_gpus"]:
        rec.notes.append(f"ranks shared GPUs {red['shared_gpus']}: each counted once")
    if red["gpus_idle"]:
        rec.notes.append(f"GPUs allocated but idle: {red['gpus_idle']}")
    s = rec.summary
    if red["wall_time_s"] is not None:
        s["wall_time_s"] = Figure.measured(
            red["wall_time_s"], "s", signal="timer", reason=f"slowest rank ({red['slowest_rank']})"
        )
    if red["gpu_energy_j"] is not None:
        s["gpu_energy_j"] = Figure.measured(
            red["gpu_energy_j"],
            "J",
            signal="+".join(sorted({g.get("signal") or "" for g in red["gpus"] if g["assigned"]})),
            lo=red["gpu_energy_lo_j"],
            hi=red["gpu_energy_hi_j"],
            reason=f"summed over {red['gpus_used']} physical GPU(s)",
        )
    else:
        s["gpu_energy_j"] = Figure.unavailable("J", red.get("gpu_energy_reason", "no GPU energy"))
    s["idle_allocated_gpu_energy_j"] = (
        Figure.measured(
            red["idle_allocated_energy_j"] or 0.0,
            "J",
            signal="counter",
            reason="GPUs allocated to the job on which no rank computed",
        )
        if red["idle_allocated_energy_j"] is not None
        else Figure.unavailable("J", "unreadable")
    )
    for r in red["per_rank"]:
        if r["wall_time_s"] is not None:
            s[f"rank{r['rank']}.wall_time_s"] = Figure.measured(
                r["wall_time_s"], "s", signal="timer"
            )
        if r["energy_j"] is not None:
            s[f"rank{r['rank']}.gpu_energy_j"] = Figure.measured(r["energy_j"], "J")
    ok = statuses == {"complete"} and not red["missing_ranks"]
    rec.status = RunStatus.COMPLETE if ok else RunStatus.INCOMPLETE
    plan.combined.mkdir(parents=True, exist_ok=True)
    RunDir(plan.combined).write_record(rec)
    return plan.combined


def _gather(ranks_dir: Path, world: int, wait_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + wait_s
    while True:
        found = [ranks_dir / f"rank{r}" / RANK_REPORT for r in range(world)]
        have = [p for p in found if p.is_file()]
        if len(have) == world or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out = []
    for p in have:
        with contextlib.suppress(OSError, json.JSONDecodeError):
            out.append(json.loads(p.read_text()))
    return out


def _atomic_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _val(f) -> float | None:
    return None if f is None else f.value


def _util_max(m, device: str) -> float | None:
    try:
        df = m.run_dir.read_samples()
    except Exception:
        return None
    v = df.loc[df["device"] == device, "util_pct"].dropna()
    if m.work is not None:
        t = df.loc[v.index, "t_s"]
        v = v[(t >= m.work.t0_s) & (t <= m.work.t1_s)]
    return float(v.max()) if len(v) else None
