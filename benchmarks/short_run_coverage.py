"""Do the regression's intervals hold the truth on short runs? Simulated 40-step loops.

`benchmarks/interval_coverage.py` draws runs of 30 s to 4 min. A user's first
`jouleprof.profile` loop is often seconds long: the README's example records 40 steps of
data 30 ms, forward 50 ms and backward 90 ms (7 s). This script draws such loops (each phase's
length jittered by 3 %, a gap of 0.3–2.3 ms between steps), plays them on the package's
simulated GPU through the same sampler schedule a CPU-only `profile` run uses
(`bench.simulate.simulate_samples`: the counter read about once per refresh), attributes each by
the regression with its defaults (no bins, as `profile` does for a simulated run), and compares
every phase's true energy over the analysed steps with its 95 % interval.

    PYTHONPATH=src python3 benchmarks/short_run_coverage.py --out DIR [--runs 30] [--steps 40]
        [--seed 0]

Writes DIR/phases.csv (seed, phase, truth, estimate, interval, covered, whether the counter
grid was placed by the offset scan), DIR/summary.json (coverage per phase and overall, median
half-width and absolute error) and DIR/meta.json; prints the summary.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PHASES_S = (("data", 0.030), ("forward", 0.050), ("backward", 0.090))


def loop_spans(seed: int, steps: int) -> pd.DataFrame:
    """The spans of a `steps`-step loop: PHASES_S each jittered by 3 %, small gaps."""
    rng = np.random.default_rng(seed)
    t, rows = 0.5, []
    for s in range(steps):
        for phase, d in PHASES_S:
            d *= 1 + 0.03 * rng.standard_normal()
            rows.append((s, phase, t, t + d))
            t += d + 2e-5
        t += 3e-4 + 0.002 * rng.random()
    return pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])


def one_run(seed: int, steps: int) -> list[dict]:
    from jouleprof.attribution.common import build_timeline
    from jouleprof.attribution.regression import attribute_regression
    from jouleprof.attribution.regression_config import RegressionConfig
    from jouleprof.bench.simulate import simulate_samples

    spans = loop_spans(seed, steps)
    sim = simulate_samples(spans, seed=seed)
    df = pd.DataFrame([dataclasses.asdict(s) for s in sim.samples])
    tl = build_timeline(spans, df["t_s"].min(), df["t_s"].max(), 1)
    t0 = time.perf_counter()
    dev = attribute_regression(df, tl, "sim0", RegressionConfig(bins=False))
    wall = time.perf_counter() - t0
    scanned = "counter_scan" in dev.diagnostics
    out = []
    for phase, _ in PHASES_S:
        p = next(r for r in dev.phases if r.phase == phase)
        truth = sum(e for (st, q), e in sim.true_step_j.items() if q == phase and st >= 1)
        row = {"seed": seed, "phase": phase, "true_j": truth, "scanned": scanned, "wall_s": wall}
        if p.energy_j is None:
            row.update(resolved=False)
        else:
            row.update(
                resolved=True,
                energy_j=p.energy_j,
                lo_j=p.energy_lo_j,
                hi_j=p.energy_hi_j,
                covered=bool(p.energy_lo_j <= truth <= p.energy_hi_j),
                err_pct=100 * (p.energy_j / truth - 1),
                halfwidth_pct=50 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j,
            )
        out.append(row)
    return out


def summarize(rows: list[dict]) -> dict:
    def group(sel):
        res = [r for r in sel if r["resolved"]]
        if not res:
            return {"phases": len(sel), "resolved": 0}
        return {
            "phases": len(sel),
            "resolved": len(res),
            "coverage_pct": 100 * float(np.mean([r["covered"] for r in res])),
            "median_halfwidth_pct": float(np.median([r["halfwidth_pct"] for r in res])),
            "median_abs_err_pct": float(np.median([abs(r["err_pct"]) for r in res])),
            "max_abs_err_pct": float(np.max([abs(r["err_pct"]) for r in res])),
        }

    out = {"all": group(rows)}
    for phase, _ in PHASES_S:
        out[phase] = group([r for r in rows if r["phase"] == phase])
    out["scanned_runs"] = len({r["seed"] for r in rows if r["scanned"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    meta = benchmark_meta(["python3", "benchmarks/short_run_coverage.py", *sys.argv[1:]], (), ROOT)
    write_meta(a.out, {**meta, "runs": a.runs, "steps": a.steps, "seed": a.seed})
    rows: list[dict] = []
    for seed in range(a.seed, a.seed + a.runs):
        rows += one_run(seed, a.steps)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with (a.out / "phases.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    summary = summarize(rows)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
