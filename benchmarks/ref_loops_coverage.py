"""How often the regression's intervals hold their references on real loops: per card and
method, over the ref_loops evaluations given (each folder's ref_loops_eval.csv, as written by
ref_loops_eval.py), the phases of at least --min-share-pct of the step's energy that have a
reference, how many are resolved, how many of those hold their reference inside the interval,
and how many are also within the target.

    PYTHONPATH=src python3 benchmarks/ref_loops_coverage.py DIR [DIR ...] --out FILE.csv

Joint rows ("a+b": phases the fit weighs together) are counted apart from phases (column
`row`: phase or joint): they are not phases of their own, and their reference is the sum of
their phases' references, which misses what the two cost only together (docs/validation.md).

A folder whose name starts with "h100" is the H100's; every other folder the H200's. With
--by-schedule the rows are also split by how the loop's steps were scheduled, from its name:
plain (every step alike), excite (short gaps in a fraction of the steps), edges (long idle
gaps), repeat (phases replayed in a fraction of the steps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

TRUE = ("True", "true", "yes")
SCHEDULES = ("excite", "edges", "repeat")
"""Loop-name suffixes of the varied schedules (ref_loops.py's variants); any other is plain."""


def card_of(folder: str) -> str:
    return "H100" if folder.startswith("h100") else "H200"


def schedule_of(loop: str) -> str:
    """plain, excite, edges or repeat, from a loop's name (user4_repeat -> repeat)."""
    return next((k for k in SCHEDULES if loop.endswith("_" + k)), "plain")


def row_kind(phase: str) -> str:
    """joint for a joint row ("a+b"), else phase."""
    return "joint" if "+" in phase else "phase"


def coverage(
    frames: dict[str, pd.DataFrame],
    min_share_pct: float,
    target_pct: float,
    by_schedule: bool = False,
):
    """One row per (card, method, row), or per (card, schedule, method, row) with
    `by_schedule` (row: "phase", or "joint" for a joint row): rows with a reference, resolved,
    reference inside the interval, inside and within ±target_pct, the median half-width of the
    resolved ones."""
    rows = []
    for folder, d in frames.items():
        d = d[d["ref_j"].notna() & (d["share_pct"] >= min_share_pct)]
        rows.append(d.assign(card=card_of(folder), folder=folder))
    if not rows:
        return pd.DataFrame()
    d = pd.concat(rows)
    d = d.assign(row=d["phase"].astype(str).map(row_kind))
    keys = ["card", "method", "row"]
    if by_schedule:
        d = d.assign(schedule=d["loop"].map(schedule_of))
        keys = ["card", "schedule", "method", "row"]
    out = []
    for key, g in d.groupby(keys, sort=True):
        res = g[g["resolved"].astype(str).isin(TRUE)]
        inside = res["inside"].astype(str).isin(TRUE)
        out.append({
            **dict(zip(keys, key, strict=True)), "phases": len(g), "resolved": len(res),
            "ref_inside": int(inside.sum()),
            "inside_within_target": int((inside & (res["error_pct"].abs() <= target_pct)).sum()),
            "median_half_width_pct": round(float(res["half_width_pct"].median()), 2),
            "runs": len(g["folder"].unique()),
        })  # fmt: skip
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--min-share-pct", type=float, default=10.0)
    ap.add_argument("--target-pct", type=float, default=5.0)
    ap.add_argument("--by-schedule", action="store_true", help="also split by the loop's schedule")
    args = ap.parse_args(argv)
    frames = {}
    for d in args.dirs:
        f = d / "ref_loops_eval.csv"
        if not f.is_file():
            print(f"ref_loops_coverage: no ref_loops_eval.csv in {d}", file=sys.stderr)
            return 2
        frames[d.name] = pd.read_csv(f)
    table = coverage(frames, args.min_share_pct, args.target_pct, args.by_schedule)
    table.to_csv(args.out, index=False)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
