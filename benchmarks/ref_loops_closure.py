"""Do a loop's references add up to its step? Where they price less (or more) of the step's
energy than the step draws, no attribution that prices the whole step can put every phase on
its reference: the leftover lands somewhere. Per loop of the ref_loops evaluations given (each
folder's ref_loops_eval.csv and loops_detail.json, as ref_loops_eval.py writes them):

- priced_pct: the references' share of the plain replayed step (`ref_loops_eval.closure`: each
  phase's reference × its occurrences, plus the step's time outside the phases at idle power),
  plus, for each phase without a reference, the larger of its two ways (an upper bound);
- leftover_pct: 100 − priced_pct, the step's energy no reference prices;
- big_share_pct: the share of the phases of ≥ --min-share-pct that have a reference;
- small_must_take_pct: how much of the step the other phases (and idle) must take for every
  big phase to stay within ±--target-pct of its reference: |leftover| − target × big share,
  at least 0 (none where the leftover is below 0 and some phase has no reference: its bound
  is from above); small_must_be_off_pct: that, over the other phases' share (how far off their
  references those phases must then be, as a group);
- removed_priced_pct: the same with the third references (the step less each phase), where
  every phase has one;
- big_excess_pct, small_excess_pct: where the method given put it (Σ (estimate − reference) ×
  occurrences per step over the step's energy, on the big phases with a reference and on the
  others with one).

    PYTHONPATH=src python3 benchmarks/ref_loops_closure.py DIR [DIR ...] --out FILE.csv
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def loop_closure(rows: pd.DataFrame, closure: dict, min_share_pct: float, target_pct: float):
    """One loop's row (see the module's doc) from its evaluation rows for one method (leaf
    phases and joint rows; joint rows, named with "+", are skipped) and its `closure` record."""
    leaf = rows[~rows["phase"].astype(str).str.contains("+", regex=False)]
    plain = _num(closure.get("plain_cycle_j"))
    refs_pct = _num(closure.get("refs_over_plain_pct"))
    if not plain or refs_pct is None:
        return None
    missing = set(closure.get("without_reference") or [])
    bound = leaf[leaf["phase"].isin(missing)]["share_pct"].fillna(0.0).sum()
    priced = refs_pct + float(bound)
    leftover = 100.0 - priced
    has_ref = leaf["ref_j"].notna()
    big = leaf[has_ref & (leaf["share_pct"] >= min_share_pct)]
    small = leaf[~leaf.index.isin(big.index)]
    big_share = float(big["share_pct"].sum())
    small_share = float(small["share_pct"].fillna(0.0).sum())
    # The phases without a reference are bounded from above, so a leftover below 0 is exact
    # only where every phase has a reference; else it says nothing.
    conclusive = leftover >= 0 or not missing
    must_take = max(0.0, abs(leftover) - target_pct / 100 * big_share) if conclusive else None
    step_j = _step_energy(leaf)

    def excess(d):
        d = d[d["ref_j"].notna() & d["estimate_j"].notna()]
        if not step_j:
            return None
        return 100 * float(((d["estimate_j"] - d["ref_j"]) * d["occ_per_step"]).sum()) / step_j

    return {
        "priced_pct": round(priced, 1),
        "removed_priced_pct": _round(_num(closure.get("removed_over_plain_pct"))),
        "leftover_pct": round(leftover, 1),
        "without_reference": ",".join(sorted(missing)),
        "big_share_pct": round(big_share, 1),
        "small_must_take_pct": _round(must_take),
        "small_must_be_off_pct": round(100 * must_take / small_share)
        if must_take is not None and small_share
        else None,
        "big_excess_pct": _round(excess(big)),
        "small_excess_pct": _round(excess(small)),
        "big_errors": "; ".join(
            f"{r.phase} {r.error_pct:+.1f}"
            for r in big.itertuples()
            if _num(r.error_pct) is not None
        ),
    }


def _round(x):
    return None if x is None else round(x, 1)


def _step_energy(leaf: pd.DataFrame) -> float | None:
    """The measured step's energy, J, from any phase row: reference × occurrences per step
    over its share (share_pct is that phase's share of the measured step)."""
    for r in leaf.itertuples():
        ref, occ, share = _num(r.ref_j), _num(r.occ_per_step), _num(r.share_pct)
        if ref and occ and share and getattr(r, "share_from", "reference") == "reference":
            return ref * occ / (share / 100)
    return None


def closure_table(folders: dict[str, tuple[pd.DataFrame, dict]], method: str,
                  min_share_pct: float, target_pct: float) -> pd.DataFrame:  # fmt: skip
    """One row per (folder, loop) evaluated with `method` whose closure was recorded."""
    out = []
    for folder, (ev, detail) in folders.items():
        ev = ev[ev["method"] == method]
        for loop, rows in ev.groupby("loop", sort=True):
            rec = (detail.get(f"{loop} {method}") or {}).get("ref_closure")
            if not rec:
                continue
            row = loop_closure(rows, rec, min_share_pct, target_pct)
            if row is not None:
                out.append({"folder": folder, "loop": loop, **row})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--method", default="regression")
    ap.add_argument("--min-share-pct", type=float, default=10.0)
    ap.add_argument("--target-pct", type=float, default=5.0)
    args = ap.parse_args(argv)
    folders = {}
    for d in args.dirs:
        ev, det = d / "ref_loops_eval.csv", d / "loops_detail.json"
        if not ev.is_file() or not det.is_file():
            print(f"ref_loops_closure: {d} lacks ref_loops_eval.csv or loops_detail.json "
                  "(run ref_loops_eval.py on it first)", file=sys.stderr)  # fmt: skip
            return 2
        folders[d.name] = (pd.read_csv(ev), json.loads(det.read_text()))
    table = closure_table(folders, args.method, args.min_share_pct, args.target_pct)
    table.to_csv(args.out, index=False)
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
