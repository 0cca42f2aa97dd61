"""The cross-rank reduction (pure): energy summed over physical GPUs, time as the slowest rank.

Each rank leaves a report (`rank_report`): its work interval and, per device it measured, the
physical key, the energy over its work and whether a rank computes on it. `reduce_reports`
merges them: a board several ranks measured counts once (the reading of the rank with the
longest work window, which covers the others'); boards allocated to the job on which no rank
computes are reported as idle, with their energy apart; per-rank figures are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

IDLE_UTIL_PCT = 5.0


def reduce_reports(reports: Sequence[dict[str, Any]], world_size: int) -> dict[str, Any]:
    """Merge the ranks' reports into the job's figures (see the module docstring)."""
    got = sorted({int(r["rank"]) for r in reports})
    missing = [r for r in range(world_size) if r not in got]
    per_rank = []
    boards: dict[str, dict[str, Any]] = {}
    for r in sorted(reports, key=lambda r: int(r["rank"])):
        wall = r.get("wall_time_s")
        per_rank.append(
            {
                "rank": r["rank"],
                "host": r.get("host"),
                "status": r.get("status"),
                "wall_time_s": wall,
                "run_dir": r.get("run_dir"),
                "devices": [d["device"] for d in r.get("devices", [])],
                "energy_j": _sum(
                    [d.get("energy_j") for d in r.get("devices", []) if d.get("assigned")]
                ),
            }
        )
        for d in r.get("devices", []):
            key = d["key"]
            b = boards.setdefault(
                key,
                {
                    "key": key,
                    "device": d["device"],
                    "ranks": [],
                    "measured_by": None,
                    "energy_j": None,
                    "assigned": False,
                    "_wall": -1.0,
                },
            )
            if d.get("assigned"):
                b["ranks"].append(r["rank"])
                b["assigned"] = True
            w = wall if wall is not None else 0.0
            if d.get("energy_j") is not None and w > b["_wall"]:
                b.update(
                    measured_by=r["rank"],
                    energy_j=d["energy_j"],
                    lo_j=d.get("lo_j"),
                    hi_j=d.get("hi_j"),
                    signal=d.get("signal"),
                    _wall=w,
                    util_max_pct=d.get("util_max_pct"),
                    avg_power_w=d.get("avg_power_w"),
                )
    gpus = []
    for b in boards.values():
        b.pop("_wall")
        util = b.get("util_max_pct")
        if not b["assigned"]:
            b["idle"], b["idle_reason"] = True, "allocated to the job, but no rank computes on it"
        elif util is not None and util < IDLE_UTIL_PCT:
            b["idle"] = True
            b["idle_reason"] = (
                f"a rank was placed on it, but utilization stayed below {IDLE_UTIL_PCT:g} %"
            )
        else:
            b["idle"], b["idle_reason"] = False, None
        b["shared_by_ranks"] = len(b["ranks"]) > 1
        gpus.append(b)
    used = [g for g in gpus if g["assigned"]]
    idle_alloc = [g for g in gpus if not g["assigned"]]
    walls = [(r["wall_time_s"], r["rank"]) for r in per_rank if r["wall_time_s"] is not None]
    out = {
        "world_size": world_size,
        "ranks_reported": got,
        "missing_ranks": missing,
        "gpu_energy_j": _sum([g["energy_j"] for g in used]),
        "gpu_energy_lo_j": _sum([g.get("lo_j") for g in used]),
        "gpu_energy_hi_j": _sum([g.get("hi_j") for g in used]),
        "idle_allocated_energy_j": _sum([g["energy_j"] for g in idle_alloc]) if idle_alloc else 0.0,
        "gpus_used": len(used),
        "gpus_idle": [g["key"] for g in gpus if g["idle"]],
        "shared_gpus": [g["key"] for g in gpus if g["shared_by_ranks"]],
        "wall_time_s": max(walls)[0] if walls else None,
        "slowest_rank": max(walls)[1] if walls else None,
        "per_rank": per_rank,
        "gpus": sorted(gpus, key=lambda g: g["key"]),
    }
    if any(g["energy_j"] is None for g in used):
        out["gpu_energy_j"] = None
        out["gpu_energy_reason"] = "some used GPU's energy is unavailable: " + ", ".join(
            g["key"] for g in used if g["energy_j"] is None
        )
    return out


def _sum(values: Sequence[float | None]) -> float | None:
    """Sum, or None when any part is missing (never a silent zero)."""
    vals = list(values)
    if any(v is None for v in vals):
        return None
    return float(sum(vals))
