"""Do the regression's intervals hold the truth on a first CPU run? Recorded spans, many sensors.

`jouleprof profile vjepa2 --preset tiny --duration-s 10` on a machine without a GPU trains on the
CPU, then plays the recorded phase spans on the package's simulated GPU and attributes it.
How fast the CPU runs the step (idle, busy, in bursts) sets the phases' lengths, and where the
sensor's refreshes fall sets what the readings can tell apart. This script takes run
directories such runs left (their spans.csv: the CPU's real phase times), plays each one's
spans on `--seeds` simulated sensors (other refresh offsets, jitter and noise:
`bench.simulate.simulate_samples(seed=…)`), attributes every one with the regression as
`profile` does (no bins), and compares each resolved row's 95 % interval with the simulated
truth.

    PYTHONPATH=src python3 benchmarks/first_run_coverage.py --out DIR --seeds 20 RUN_DIR...
        [--no-pin]

`--no-pin` leaves out the spread of phases fitted at unphysical powers
(`attribution.pinned`), to measure what it changes. Writes DIR/rows.csv (run, seed, phase,
truth, estimate, interval, covered), DIR/summary.json (per phase and overall: rows resolved,
coverage of the 95 % interval and of the interval widened by half, median half-width, largest
error) and DIR/meta.json; prints the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def one(spans: pd.DataFrame, seed: int) -> list[dict]:
    """Every row of the regression's table for `spans` on the simulated sensor `seed`."""
    from jouleprof.attribution.api import attribute
    from jouleprof.bench.simulate import SIM_DEVICE, _truth, simulate_samples
    from jouleprof.store.rundir import RunDir

    sim = simulate_samples(spans, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        spans.to_csv(Path(tmp) / "spans.csv", index=False)
        w = RunDir(tmp).sample_writer()
        try:
            w.write(sim.samples)
        finally:
            w.close()
        res = attribute(tmp, "regression", device=SIM_DEVICE, warmup_steps=0, bins=False)
    out = []
    for p in res.devices[0].phases:
        truth = _truth(sim.true_step_j, p.phase, res)
        if truth is None or not p.resolved:
            out.append({"phase": p.phase, "resolved": p.resolved, "truth_j": truth})
            continue
        out.append(
            {
                "phase": p.phase,
                "resolved": True,
                "truth_j": truth,
                "energy_j": p.energy_j,
                "lo_j": p.energy_lo_j,
                "hi_j": p.energy_hi_j,
            }
        )
    return out


def summarize(rows: pd.DataFrame) -> dict:
    r = rows[rows["resolved"] & rows["truth_j"].notna()].copy()
    e, t = r["energy_j"], r["truth_j"]
    r["covered"] = (r["lo_j"] <= t) & (t <= r["hi_j"])
    lo15, hi15 = e - 1.5 * (e - r["lo_j"]), e + 1.5 * (r["hi_j"] - e)
    r["covered_15"] = (lo15 <= t) & (t <= hi15)
    r["err_pct"] = 100 * (e / t - 1)
    r["hw_pct"] = 50 * (r["hi_j"] - r["lo_j"]) / t

    def stats(g: pd.DataFrame) -> dict:
        return {
            "resolved_rows": int(len(g)),
            "coverage_pct": float(100 * g["covered"].mean()),
            "coverage_widened_by_half_pct": float(100 * g["covered_15"].mean()),
            "median_halfwidth_pct": float(g["hw_pct"].median()),
            "max_abs_err_pct": float(g["err_pct"].abs().max()),
        }

    out = {"all": stats(r), "rows": int(len(rows))}
    for phase, g in r.groupby("phase"):
        out[str(phase)] = stats(g)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories holding spans.csv")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--no-pin", action="store_true", help="leave out the pinned spread")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.no_pin:
        import jouleprof.attribution.regression as reg

        reg.pinned_spread = lambda *a, **k: ([], [])
    args.out.mkdir(parents=True, exist_ok=True)
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    meta = benchmark_meta(["python3", "benchmarks/first_run_coverage.py", *sys.argv[1:]], (), ROOT)
    t0 = time.time()
    rows = []
    for run in args.runs:
        spans = pd.read_csv(run / "spans.csv")
        for seed in range(args.seeds):
            for r in one(spans, seed):
                rows.append({"run": run.name, "seed": seed, **r})
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "rows.csv", index=False)
    summary = summarize(df)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    write_meta(
        args.out,
        {
            **meta,
            "runs": [str(r) for r in args.runs],
            "seeds": args.seeds,
            "pinned_spread": not args.no_pin,
            "wall_s": round(time.time() - t0, 1),
            "source": "simulated GPU driven by CPU runs' recorded spans",
        },
    )
    a = summary["all"]
    print(
        f"{a['resolved_rows']} resolved rows: {a['coverage_pct']:.1f}% inside their 95% "
        f"interval, {a['coverage_widened_by_half_pct']:.1f}% inside it widened by half; "
        f"median half-width {a['median_halfwidth_pct']:.1f}%, largest error "
        f"{a['max_abs_err_pct']:.0f}%"
    )
    for k, v in summary.items():
        if isinstance(v, dict) and k != "all":
            print(
                f"  {k:20s} {v['resolved_rows']:5d} rows  {v['coverage_pct']:5.1f}%  "
                f"{v['coverage_widened_by_half_pct']:5.1f}%  ±{v['median_halfwidth_pct']:.1f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
