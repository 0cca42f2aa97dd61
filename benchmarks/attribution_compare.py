"""Compare a fine run's phase attribution methods against the isolation reference.

Reads RUN_DIR/phases_{proportional,regression,isolation}.csv (written by `jouleprof profile
--isolation-s ...`), sums nested phases into their top-level phase ("forward/target" →
"forward"), and reports, per phase: each method's energy per step, its difference from
isolation in percent, and the phase's share of step energy. Checks the issue's target:
regression within 5 % of isolation for every phase holding ≥ 2 % of step energy.

Also checks the reference itself: a replay is faithful when it takes as long per call as the
phase takes inside training steps (within 10 %); the sum of the isolated phases is compared with
the measured energy of a step (the proportional split's total).

Usage: python benchmarks/attribution_compare.py RUN_DIR [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

METHODS = ("proportional", "regression", "isolation")


DEVICE = "gpu0"
"""The device compared (a run measuring several GPUs has rows for each)."""


def per_step(run_dir: Path, method: str) -> pd.DataFrame | None:
    """Energy (with bounds) and time per step of each top-level phase: a parent's own share
    plus its children's ("forward" = "forward" + "forward/target" + "forward/context")."""
    p = run_dir / f"phases_{method}.csv"
    if not p.is_file():
        return None
    df = pd.read_csv(p)
    if "device" in df.columns:
        df = df[df["device"].astype(str) == DEVICE]
    df = df[~df["phase"].isin(["total", "idle", "untracked", "outside"])].copy()
    df["top"] = df["phase"].astype(str).str.split("/").str[0]
    steps = df["time_s"] / df["time_per_step_s"]
    df["energy_per_step_j"] = df["energy_j"] / steps
    df["lo_per_step_j"] = df["energy_lo_j"] / steps
    df["hi_per_step_j"] = df["energy_hi_j"] / steps
    cols = ["energy_per_step_j", "lo_per_step_j", "hi_per_step_j", "time_per_step_s"]
    return df.groupby("top")[cols].sum(min_count=1)


def replay_times(run_dir: Path) -> dict[str, float]:
    """Seconds per call of each phase as replayed alone (backward = forward+backward − forward)."""
    p = run_dir / "isolation_windows.csv"
    if not p.is_file():
        return {}
    w = pd.read_csv(p).set_index("replay")["time_per_call_s"].to_dict()
    out = {k: float(v) for k, v in w.items() if k in ("forward", "optimizer", "ema")}
    if "forward+backward" in w and "forward" in w:
        out["backward"] = float(w["forward+backward"] - w["forward"])
    return out


def compare(run_dir: Path) -> dict:
    tables = {m: per_step(run_dir, m) for m in METHODS}
    iso = tables["isolation"]
    out: dict = {
        "run_dir": str(run_dir),
        "phases": {},
        "missing": [m for m, t in tables.items() if t is None],
    }
    if iso is None:
        out["verdict"] = "no isolation reference in this run (use --isolation-s)"
        return out
    total = float(iso["energy_per_step_j"].sum())
    ok = True
    for phase in iso.index:
        ref = float(iso.loc[phase, "energy_per_step_j"])
        row = {"isolation_j": ref, "share_pct": 100 * ref / total if total else None}
        for m in ("proportional", "regression"):
            t = tables[m]
            if t is not None and phase in t.index and pd.notna(t.loc[phase, "energy_per_step_j"]):
                v = float(t.loc[phase, "energy_per_step_j"])
                row[f"{m}_j"] = v
                row[f"{m}_vs_isolation_pct"] = 100 * (v / ref - 1) if ref else None
        if row["share_pct"] and row["share_pct"] >= 2:
            d = row.get("regression_vs_isolation_pct")
            row["meets_5pct_target"] = d is not None and abs(d) <= 5
            ok &= bool(row["meets_5pct_target"])
        out["phases"][phase] = row
    # Rows the regression could only weigh jointly ("optimizer+ema"): against the members'
    # isolated sum (reported beside, not counted for the per-phase target).
    reg = tables["regression"]
    for joint in [] if reg is None else [p for p in reg.index if "+" in p]:
        members = joint.split("+")
        if all(m in iso.index for m in members):
            ref = float(iso.loc[members, "energy_per_step_j"].sum())
            v = float(reg.loc[joint, "energy_per_step_j"])
            out["phases"][joint] = {
                "isolation_j": ref,
                "share_pct": 100 * ref / total if total else None,
                "regression_j": v,
                "regression_vs_isolation_pct": 100 * (v / ref - 1) if ref else None,
                "joint": True,
            }
    out["regression_meets_target"] = ok
    replay = replay_times(run_dir)
    prop = tables["proportional"]  # its time per step is each phase's time inside the steps
    inside = {} if prop is None else prop["time_per_step_s"].astype(float).to_dict()
    for phase, row in out["phases"].items():
        if phase in replay and inside.get(phase):
            row["replay_s"], row["in_step_s"] = replay[phase], inside[phase]
            row["replay_time_ratio"] = replay[phase] / inside[phase]
            row["replay_faithful"] = abs(row["replay_time_ratio"] - 1) <= 0.10
    if prop is not None:
        step_j = float(prop["energy_per_step_j"].sum())
        out["measured_step_j"] = step_j
        out["isolation_sum_j"] = total
        out["isolation_sum_vs_measured_pct"] = 100 * (total / step_j - 1) if step_j else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res = compare(a.run_dir)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    cols = ("phase", "share%", "isol J", "regr J", "regr%", "prop J", "prop%", "replay/in")
    print(" ".join(f"{c:>9s}" for c in cols))
    fields = (
        ("share_pct", "9.1f"),
        ("isolation_j", "9.3f"),
        ("regression_j", "9.3f"),
        ("regression_vs_isolation_pct", "+9.1f"),
        ("proportional_j", "9.3f"),
        ("proportional_vs_isolation_pct", "+9.1f"),
        ("replay_time_ratio", "9.2f"),
    )
    for ph, r in res["phases"].items():
        cells = [format(r[k], fmt) if r.get(k) is not None else f"{'—':>9s}" for k, fmt in fields]
        print(f"{ph:>9s} " + " ".join(cells))
    print(
        "regression within 5% of isolation for phases ≥2% of energy:",
        res.get("regression_meets_target"),
    )
    if res.get("isolation_sum_vs_measured_pct") is not None:
        print(
            f"isolated phases sum to {res['isolation_sum_j']:.2f} J against "
            f"{res['measured_step_j']:.2f} J measured per step "
            f"({res['isolation_sum_vs_measured_pct']:+.1f} %)"
        )
    sys.exit(0)


if __name__ == "__main__":
    main()
