"""Do phases that share energy meet the target when weighed together? (issue 20, user4)

On user4 (a bf16 GEMM, then a 1 GiB copy, a spin kernel and a burst of tiny kernels), the GEMM
and the copy share energy: removing the GEMM from the step saves more than the GEMM alone costs,
and the references of the four phases price only 92-95 % of the step
(results/ref_loops/README.md, "A third reference"). So each one's energy is defined only to
within that shared energy, and the regression's GEMM came 10-16 % above its alone/added
reference on every plain run. Their sum is defined: this script attributes each stored run with
the pair weighed together (`attribute(..., joint=["gemm+copy"])`, `--joint gemm+copy`) and
compares the pair's row with references of the pair made from the reference runs already
stored (no new GPU run):

- closure_j: the plain replayed step's energy less the other phases' references (each one's
  reference; where it has none at the step's pace, its "step less it" reference, else the
  larger of its alone and added ones) and the step's time outside the phases at idle power.
  It prices the pair with whatever energy the two share, as the step draws it. Where the loop
  repeats a member (user4_repeat: the copy 1.2 times a step on average), each repeat is added
  at the member's reference (`repeats_j`): the plain replayed step runs it once.
- bracket: [the pair's alone/added references summed, their "step less it" references summed]
  (where the run measured the latter; a member's repeats at its reference in both). If the
  shared energy I adds only where both run, the first is A + B, the second A + B + 2I and the
  pair A + B + I: its midpoint (midpoint_j).

    PYTHONPATH=src python3 benchmarks/joint_rows_check.py --out DIR FOLDER:LOOP [...] \
        [--group gemm+copy] [--target-pct 5]

FOLDER is a ref_loops results folder (benchmarks/results/ref_loops/<folder>, its loops in
loops/ or in <loop>.tar.gz); the references are read from span_check/<folder> where that
re-evaluation exists, else from the folder's own ref_loops_eval.csv and loops_detail.json. Writes
DIR/joint_rows.csv, DIR/joint_rows.md and DIR/meta.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results" / "ref_loops"


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def other_reference(row: pd.Series) -> tuple[float | None, str]:
    """A phase's reference for pricing what is not the pair: its reference, else its "step
    less it" one (at the step's own pace), else the larger of alone and added (an upper bound,
    so the pair's closure is then a lower bound)."""
    for col, how in (("ref_j", "reference"), ("ref_removed_j", "step less it")):
        v = _num(row.get(col))
        if v is not None:
            return v, how
    ways = [v for v in (_num(row.get("ref_alone_j")), _num(row.get("ref_added_j"))) if v]
    return (max(ways), "max(alone, added)") if ways else (None, "none")


def pair_references(evals: pd.DataFrame, closure: dict, members: list[str]) -> dict:
    """The pair's references (module doc) from one loop's evaluation rows (one method, leaf
    phases) and its `ref_closure` record."""
    from ref_loops_eval import repeats_at_reference

    leaf = evals[~evals["phase"].astype(str).str.contains("+", regex=False)]
    leaf = leaf.drop_duplicates("phase").set_index("phase")
    out: dict = {"closure_j": None, "sum_refs_j": None, "sum_removed_j": None,
                 "midpoint_j": None, "others_priced_by": ""}  # fmt: skip
    if any(m not in leaf.index for m in members):
        return out
    refs = [_num(leaf.loc[m, "ref_j"]) for m in members]
    removed = [_num(leaf.loc[m].get("ref_removed_j")) for m in members]
    occ = [float(leaf.loc[m, "occ_per_step"]) for m in members]
    if all(r is not None for r in refs):
        out["sum_refs_j"] = sum(r * o for r, o in zip(refs, occ, strict=True))
    if all(r is not None for r in removed) and all(r is not None for r in refs):
        # each member left out once (what it shares counted with it), its repeats at its
        # reference
        out["sum_removed_j"] = sum(removed) + repeats_at_reference(
            list(zip(occ, refs, strict=True))
        )
    if out["sum_refs_j"] is not None and out["sum_removed_j"] is not None:
        out["midpoint_j"] = 0.5 * (out["sum_refs_j"] + out["sum_removed_j"])
    plain = _num(closure.get("plain_cycle_j"))
    others, how = 0.0, []
    for p, row in leaf.iterrows():
        if p in members:
            continue
        v, by = other_reference(row)
        if v is None:
            return out
        others += v * float(row["occ_per_step"])
        how.append(f"{p}: {by}")
    # The plain replayed step runs each member once; a loop that repeats a member runs it
    # occ times a step on average, the repeats right after itself, as when looped alone: each
    # repeat is priced at the member's reference.
    repeats = repeats_at_reference(list(zip(occ, refs, strict=True)))
    if plain is None or repeats is None:
        return out
    out["repeats_j"] = repeats
    gap = _num(closure.get("gap_at_idle_j")) or 0.0
    out["closure_j"] = plain - others - gap + out["repeats_j"]
    out["others_priced_by"] = "; ".join(how)
    return out


def check_one(folder: str, loop: str, group: str, target_pct: float) -> dict:
    """One run: its pair row (from the regression with `group` asked for) and references."""
    import ref_loops_eval as ev

    from jouleprof.attribution.api import attribute

    res_dir = Path(folder) if Path(folder).is_dir() else RESULTS / folder
    members = group.split("+")
    with tempfile.TemporaryDirectory() as tmp:
        base = ev.unpack(res_dir, Path(tmp))
        fine = base / "loops" / loop / "fine"
        dev = attribute(fine, "regression", device=ev._fine_device(fine), joint=[group])
        dev = dev.devices[0]
    by = {p.phase: p for p in dev.phases}
    row = next((p for p in dev.phases if set(p.phase.split("+")) == set(members)), None)
    # The references as last evaluated: span_check/ re-evaluated the earlier folders (their
    # own files may predate the closure record); the later folders hold their own.
    ref_dir = RESULTS / "span_check" / res_dir.name
    ref_dir = ref_dir if (ref_dir / "ref_loops_eval.csv").is_file() else res_dir
    evals = pd.read_csv(ref_dir / "ref_loops_eval.csv")
    evals = evals[(evals["loop"] == loop) & (evals["method"] == "regression")]
    detail = json.loads((ref_dir / "loops_detail.json").read_text())
    closure = (detail.get(f"{loop} regression") or {}).get("ref_closure") or {}
    refs = pair_references(evals, closure, members)
    n = dev.n_steps
    out = {"folder": res_dir.name, "loop": loop, "group": group, "n_steps": n,
           "references_from": str(ref_dir.relative_to(ROOT)) if ref_dir.is_relative_to(ROOT)
           else str(ref_dir)}  # fmt: skip
    if row is None or not row.resolved:
        out.update(resolved=False, note=None if row is None else row.note, **refs)
        return out
    e, lo, hi = row.energy_j / n, row.energy_lo_j / n, row.energy_hi_j / n
    out.update(resolved=True, estimate_j=e, lo_j=lo, hi_j=hi,
               half_width_pct=50 * (hi - lo) / e, **refs)  # fmt: skip
    for name in ("closure_j", "midpoint_j"):
        r = refs[name]
        key = name.removesuffix("_j")
        out[f"error_vs_{key}_pct"] = None if r is None else 100 * (e / r - 1)
        out[f"inside_{key}"] = None if r is None else bool(lo <= r <= hi)
    r = refs["closure_j"]
    out["meets_target"] = (
        None
        if r is None
        else bool(abs(e / r - 1) <= target_pct / 100 and out["half_width_pct"] <= target_pct
                  and lo <= r <= hi)
    )  # fmt: skip
    for m in members:  # the members as the same fit gives them, for comparison
        p = by.get(m)
        out[f"{m}_j"] = None if p is None or not p.resolved else p.energy_j / n
        out[f"{m}_half_width_pct"] = (
            None
            if p is None or not p.resolved
            else 50 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j
        )
    return out


def markdown(rows: list[dict]) -> str:
    def f(v, spec=".2f"):
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)

    lines = [
        "| run | loop | pair J/step | ± % | closure ref | error % | inside | bracket (midpoint) "
        "| meets ±5 % |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        br = (
            f"[{f(r.get('sum_refs_j'))}, {f(r.get('sum_removed_j'))}] ({f(r.get('midpoint_j'))})"
            if r.get("sum_removed_j") is not None
            else f"[{f(r.get('sum_refs_j'))}, —]"
        )
        lines.append(
            f"| {r['folder']} | {r['loop']} | {f(r.get('estimate_j'))} | "
            f"{f(r.get('half_width_pct'), '.1f')} | {f(r.get('closure_j'))} | "
            f"{f(r.get('error_vs_closure_pct'), '+.1f')} | {r.get('inside_closure')} | {br} | "
            f"{r.get('meets_target')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="FOLDER:LOOP, e.g. h100_call8:user4")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--group", default="gemm+copy")
    ap.add_argument("--target-pct", type=float, default=5.0)
    a = ap.parse_args(argv)
    t0 = time.time()
    rows = []
    for spec in a.runs:
        folder, _, loop = spec.partition(":")
        if not loop:
            ap.error(f"{spec!r}: give FOLDER:LOOP, e.g. h100_call8:user4")
        rows.append(check_one(folder, loop, a.group, a.target_pct))
        r = rows[-1]
        print(f"{folder}:{loop} {a.group}: {r.get('estimate_j')} vs closure {r.get('closure_j')}")
    a.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(a.out / "joint_rows.csv", index=False)
    (a.out / "joint_rows.md").write_text(markdown(rows))
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    cmd = ["python3", "benchmarks/joint_rows_check.py", *(sys.argv[1:] if argv is None else argv)]
    write_meta(a.out, {**benchmark_meta(cmd, (), ROOT), "wall_s": round(time.time() - t0, 1),
                       "source": "stored ref_loops runs (GPU), attributed offline"})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
