"""Fine mode's overhead over several repeated runs, pooled pair by pair.

Each fine run measures its overhead on interleaved one-step pairs (instrumented, then not, or
the reverse) in its own process (`jouleprof.bench.overhead`); run.json keeps every pair's block
medians (extra.overhead). One run of 150 pairs puts the overhead within about ±1 %, too wide to
show it below 0.5 %. The pairs of repeated runs of one step are samples of the same ratio, so
this pools them: each pair's log ratio log(instrumented / base), the mean over all pairs
(geometric mean − 1) and the median pair, each with a bootstrap interval that resamples pairs
within each run (a stratified bootstrap: a run's own offset, if any, stays with its pairs).

    PYTHONPATH=src python3 benchmarks/overhead_pool.py RUN... [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def pair_log_ratios(run: Path) -> np.ndarray:
    """log(instrumented / base) of each overhead pair recorded in the run's run.json."""
    rec = json.loads((run / "run.json").read_text())
    ov = (rec.get("extra") or {}).get("overhead")
    if not ov or not ov.get("block_medians_base_s"):
        raise SystemExit(f"{run}: run.json holds no overhead pairs (extra.overhead)")
    inst = np.asarray(ov["block_medians_instrumented_s"], float)
    base = np.asarray(ov["block_medians_base_s"], float)
    if inst.shape != base.shape or np.any(inst <= 0) or np.any(base <= 0):
        raise SystemExit(f"{run}: unequal or non-positive overhead block medians in run.json")
    return np.log(inst / base)


def pool_pairs(
    per_run: list[np.ndarray], n_boot: int = 4000, confidence: float = 0.95, seed: int = 0
) -> dict:
    """Mean and median overhead (%) over the pairs of all runs, stratified bootstrap intervals."""
    if not per_run or any(r.size == 0 for r in per_run):
        raise ValueError("every run needs at least one overhead pair")
    rng = np.random.default_rng(seed)
    allr = np.concatenate(per_run)
    means, medians = np.empty(n_boot), np.empty(n_boot)
    for b in range(n_boot):
        draw = np.concatenate([r[rng.integers(0, r.size, r.size)] for r in per_run])
        means[b], medians[b] = draw.mean(), np.median(draw)
    a = (1 - confidence) / 2
    pct = lambda v: float(100 * np.expm1(v))  # noqa: E731
    return {
        "n_runs": len(per_run),
        "n_pairs": int(allr.size),
        "mean_pct": pct(allr.mean()),
        "mean_ci_pct": [pct(q) for q in np.quantile(means, [a, 1 - a])],
        "median_pct": pct(np.median(allr)),
        "median_ci_pct": [pct(q) for q in np.quantile(medians, [a, 1 - a])],
        "confidence": confidence,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    per_run = [pair_log_ratios(r) for r in a.runs]
    for run, r in zip(a.runs, per_run, strict=True):
        print(
            f"{run.name}: {r.size} pairs, mean {100 * np.expm1(r.mean()):+.2f} %, "
            f"median {100 * np.expm1(np.median(r)):+.2f} %"
        )
    res = pool_pairs(per_run)
    lo, hi = res["mean_ci_pct"]
    mlo, mhi = res["median_ci_pct"]
    print(
        f"pooled over {res['n_runs']} runs, {res['n_pairs']} pairs: mean {res['mean_pct']:+.2f} % "
        f"[{lo:+.2f}, {hi:+.2f}], median pair {res['median_pct']:+.2f} % [{mlo:+.2f}, {mhi:+.2f}]"
    )
    if a.json:
        res["runs"] = [str(r) for r in a.runs]
        a.json.write_text(json.dumps(res, indent=1))
    sys.exit(0)


if __name__ == "__main__":
    main()
