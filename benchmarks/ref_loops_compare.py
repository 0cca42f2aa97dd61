"""Compare two evaluations of the same stored reference-loop folders (offline).

Each root holds one folder per run (as benchmarks/results/ref_loops/<run>/), each evaluated by
`ref_loops_eval.py` with one version of the code. Prints, per regression row, what changed
(resolution, estimate, half-width, reference inside) and every target verdict that changed;
nothing for a folder that evaluates identically.

    PYTHONPATH=OLD/src python3 benchmarks/ref_loops_eval.py A/<run> --out A/<run>   # each run
    PYTHONPATH=src     python3 benchmarks/ref_loops_eval.py B/<run> --out B/<run>
    python3 benchmarks/ref_loops_compare.py A B <run> [<run> ...]

`--old-method` and `--new-method` compare two methods or variants instead (as
`ref_loops_eval.py --methods` names them: regression, regression_sensor, ...), A and B then
possibly the same root. The last lines count, over all runs, the phases of ≥ 10 % of the step
resolved with their reference outside their interval, and the targets met, on each side.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

KEY = ["loop", "phase"]
BIG_PCT = 10.0


def _differs(a, b, rel: float) -> bool:
    if pd.isna(a) and pd.isna(b):
        return False
    if pd.isna(a) or pd.isna(b):
        return True
    return not math.isclose(float(a), float(b), rel_tol=rel, abs_tol=0.0)


def row_changes(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """One line per row whose resolution, estimate, half-width or inside moved (the rows of
    one method on each side)."""
    m = old.merge(new, on=KEY, suffixes=("_old", "_new"), how="outer")
    out = []
    for _, r in m.iterrows():
        ch = []
        if r["resolved_old"] != r["resolved_new"]:
            ch.append(f"resolved {r['resolved_old']} -> {r['resolved_new']}")
        if _differs(r["estimate_j_old"], r["estimate_j_new"], 1e-6):
            ch.append(f"J {r['estimate_j_old']:.4g} -> {r['estimate_j_new']:.4g}")
        if _differs(r["half_width_pct_old"], r["half_width_pct_new"], 1e-4):
            ch.append(f"± {r['half_width_pct_old']:.2f} % -> {r['half_width_pct_new']:.2f} %")
        if not (pd.isna(r["inside_old"]) and pd.isna(r["inside_new"])) and (
            r["inside_old"] != r["inside_new"]
        ):
            ch.append(f"inside {r['inside_old']} -> {r['inside_new']}")
        if ch:
            out.append(
                f"{r['loop']} {r['phase']} ({r['share_pct_old']:.1f} %, "
                f"error {r['error_pct_old']:.3g} %): " + "; ".join(ch)
            )
    return out


def target_changes(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    m = old.merge(new, on=["loop"], suffixes=("_old", "_new"), how="outer")
    out = []
    for _, r in m.iterrows():
        a = (r["met_old"], r["fails_old"], r.get("notes_old"))
        b = (r["met_new"], r["fails_new"], r.get("notes_new"))
        if [str(v) for v in a] != [str(v) for v in b]:
            out.append(f"target {r['loop']}: {a} -> {b}")
    return out


def outside_big(rows: pd.DataFrame) -> int:
    """Phases of ≥ BIG_PCT of the step resolved with their reference outside the interval."""
    big = rows[(rows["share_pct"] >= BIG_PCT) & (rows["resolved"] == True)]  # noqa: E712
    return int((big["inside"].astype(str) == "False").sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--old-method", default="regression")
    ap.add_argument("--new-method", default="regression")
    a = ap.parse_args(argv)
    totals = {"outside_old": 0, "outside_new": 0, "met_old": 0, "met_new": 0, "loops": 0}
    for run in a.runs:
        try:
            old = pd.read_csv(a.old / run / "ref_loops_eval.csv")
            new = pd.read_csv(a.new / run / "ref_loops_eval.csv")
            t_old = pd.read_csv(a.old / run / "targets.csv")
            t_new = pd.read_csv(a.new / run / "targets.csv")
        except (OSError, pd.errors.ParserError) as e:
            print(f"{run}: cannot read its evaluations ({e})", file=sys.stderr)
            return 1
        old, new = old[old["method"] == a.old_method], new[new["method"] == a.new_method]
        t_old, t_new = (
            t_old[t_old["method"] == a.old_method],
            t_new[t_new["method"] == a.new_method],
        )
        lines = row_changes(old, new) + target_changes(t_old, t_new)
        print(f"{run}: " + ("identical" if not lines else f"{len(lines)} change(s)"))
        for line in lines:
            print("   " + line)
        totals["outside_old"] += outside_big(old)
        totals["outside_new"] += outside_big(new)
        totals["met_old"] += int((t_old["met"] == True).sum())  # noqa: E712
        totals["met_new"] += int((t_new["met"] == True).sum())  # noqa: E712
        totals["loops"] += len(t_new)
    print(
        f"phases of >= {BIG_PCT:g} % resolved with the reference outside: "
        f"{totals['outside_old']} -> {totals['outside_new']}; targets met: "
        f"{totals['met_old']} -> {totals['met_new']} of {totals['loops']} loop runs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
