"""Compare a fine run's phase attribution methods against the isolation reference.

Reads RUN_DIR/phases_{proportional,regression,isolation}.csv (written by `jouleprof profile
--isolation-s ...`), sums nested phases into their top-level phase ("forward/target" →
"forward"), and reports, per phase: each method's energy per step, its difference from
isolation in percent, and the phase's share of step energy. Checks the issue's target:
regression within 5 % of isolation for every phase holding ≥ 2 % of step energy.

Usage: python benchmarks/attribution_compare.py RUN_DIR [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

METHODS = ("proportional", "regression", "isolation")


def per_step(run_dir: Path, method: str) -> pd.DataFrame | None:
    p = run_dir / f"phases_{method}.csv"
    if not p.is_file():
        return None
    df = pd.read_csv(p)
    if "device" in df.columns:
        df = df[df["device"].astype(str).str.startswith("gpu")]
    df = df[~df["phase"].isin(["total", "idle", "untracked", "outside"])].copy()
    df["top"] = df["phase"].astype(str).str.split("/").str[0]
    steps = df["time_s"] / df["time_per_step_s"]
    df["energy_per_step_j"] = df["energy_j"] / steps
    df["lo_per_step_j"] = df["energy_lo_j"] / steps
    df["hi_per_step_j"] = df["energy_hi_j"] / steps
    return df.groupby("top")[["energy_per_step_j", "lo_per_step_j", "hi_per_step_j"]].sum(
        min_count=1
    )


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
    out["regression_meets_target"] = ok
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res = compare(a.run_dir)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    cols = ("phase", "share%", "isol J", "regr J", "regr%", "prop J", "prop%")
    print(" ".join(f"{c:>9s}" for c in cols))
    fields = (
        ("share_pct", "9.1f"),
        ("isolation_j", "9.3f"),
        ("regression_j", "9.3f"),
        ("regression_vs_isolation_pct", "+9.1f"),
        ("proportional_j", "9.3f"),
        ("proportional_vs_isolation_pct", "+9.1f"),
    )
    for ph, r in res["phases"].items():
        cells = [format(r[k], fmt) if r.get(k) is not None else f"{'—':>9s}" for k, fmt in fields]
        print(f"{ph:>9s} " + " ".join(cells))
    print(
        "regression within 5% of isolation for phases ≥2% of energy:",
        res.get("regression_meets_target"),
    )
    sys.exit(0)


if __name__ == "__main__":
    main()
