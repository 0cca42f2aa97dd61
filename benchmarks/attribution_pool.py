"""Several repeated fine runs, pooled: is each phase's regression unbiased against isolation?

One run's regression carries an interval; repeats of the same step (attr_vith_b8 run6–run8)
give independent estimates. Per phase and run this takes the regression's difference from that
run's own isolation reference, d_i = regression_i / isolation_i − 1, and its standard error
s_i from the run's 95 % interval (half-width / 1.96, relative to isolation). It pools them by
inverse variance: d = Σ d_i/s_i² / Σ 1/s_i², with standard error 1/√Σ 1/s_i². χ² = Σ ((d_i −
d)/s_i)² on n − 1 degrees of freedom says whether the runs agree within their own intervals (a
large χ² means the intervals understate the scatter; the pooled error is then scaled by
√(χ²/(n − 1))).

The reference's own run-to-run noise is not in s_i: each run is compared with its own.

A phase recorded as children ("forward/target", "forward/context") is summed as
attribution_compare does; its half-width is the children's in quadrature (an approximation:
neighbouring children's errors are anti-correlated, so this overstates it).

    PYTHONPATH=src python3 benchmarks/attribution_pool.py RUN... [--regression FILE] [--json OUT]

FILE: the regression's file in each run (default phases_regression_auto.csv, else
phases_regression.csv).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from attribution_compare import per_step

Z95 = 1.959964


def run_differences(run: Path, regression: str | None = None) -> dict[str, dict]:
    """Per phase of one run: regression and isolation per step, d and s (fractions)."""
    name = regression or (
        "phases_regression_auto.csv"
        if (run / "phases_regression_auto.csv").is_file()
        else "phases_regression.csv"
    )
    reg, iso = per_step(run, "regression", name), per_step(run, "isolation")
    out = {}
    for phase in iso.index:
        ref = iso.loc[phase, "energy_per_step_j"]
        if phase not in reg.index or pd.isna(ref) or not ref > 0:
            continue
        e, hw = reg.loc[phase, "energy_per_step_j"], reg.loc[phase, "half_width_j"]
        if pd.isna(e) or pd.isna(hw) or not hw > 0:
            continue  # unresolved in this run
        out[phase] = {
            "regression_j": float(e),
            "isolation_j": float(ref),
            "d": float(e / ref - 1),
            "s": float(hw / Z95 / ref),
        }
    return out


def pool(runs: list[Path], regression: str | None = None) -> dict:
    """The pooled difference per phase (module docstring) over `runs`."""
    per_run = {str(r): run_differences(r, regression) for r in runs}
    phases = sorted({p for d in per_run.values() for p in d})
    out: dict = {"runs": list(per_run), "per_run": per_run, "pooled": {}}
    for phase in phases:
        rows = [d[phase] for d in per_run.values() if phase in d]
        d = np.array([r["d"] for r in rows])
        s = np.array([r["s"] for r in rows])
        w = 1 / s**2
        mean = float(np.sum(w * d) / np.sum(w))
        se = float(1 / np.sqrt(np.sum(w)))
        chi2 = float(np.sum(((d - mean) / s) ** 2))
        dof = len(rows) - 1
        scale = max(1.0, np.sqrt(chi2 / dof)) if dof > 0 else 1.0
        out["pooled"][phase] = {
            "n_runs": len(rows),
            "d_pct": 100 * mean,
            "ci95_pct": [100 * (mean - Z95 * se * scale), 100 * (mean + Z95 * se * scale)],
            "se_pct": 100 * se * scale,
            "chi2": chi2,
            "dof": dof,
            "scatter_sd_pct": float(100 * np.std(d, ddof=1)) if dof > 0 else None,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--regression")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res = pool(a.runs, a.regression)
    for phase, p in res["pooled"].items():
        per = ", ".join(
            f"{100 * d[phase]['d']:+.1f} ± {100 * Z95 * d[phase]['s']:.1f} %"
            for d in res["per_run"].values()
            if phase in d
        )
        lo, hi = p["ci95_pct"]
        print(
            f"{phase:>10s}: pooled {p['d_pct']:+.1f} % [{lo:+.1f}, {hi:+.1f}] over {p['n_runs']} "
            f"runs (χ² {p['chi2']:.1f} on {p['dof']}); per run {per}"
        )
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    sys.exit(0)


if __name__ == "__main__":
    main()
