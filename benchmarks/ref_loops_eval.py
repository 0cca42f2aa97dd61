"""Evaluate benchmarks/ref_loops.py's results offline: attribution against the references.

    PYTHONPATH=src python3 benchmarks/ref_loops_eval.py RESULTS_DIR [--out DIR] [--target-pct 5]

RESULTS_DIR holds meta.json, loops.csv and per loop loops/<loop>/{fine,ref}/ or <loop>.tar.gz
(unpacked into --out). An excited loop `<base>_excite` or `<base>_edges` is checked against its
own ref/ where it made one, else its base loop's loops/<base>/ref (`reference_dir`). Per loop ×
method (regression; proportional = time share) × phase: the reference per occurrence both ways
(alone, added: benchmarks/ref_loops_refs.py), the estimate per occurrence, its error and interval,
resolved or not, the phase's share of the step's energy (reference × occurrences over the
measured step energy), and for an unresolved phase the steps (seconds) of fine measurement it
would need. The issue's target, per loop: every phase ≥ 10 % of the step's energy resolved
within ±5 % with its reference inside its interval; every phase ≥ 2 % resolved or reported
unresolved with the steps it would need.

Writes --out/ref_loops_eval.csv, ref_loops_eval.md and targets.csv; prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ref_loops import base_of  # noqa: E402
from ref_loops_refs import references  # noqa: E402

BIG_PCT, SMALL_PCT = 10.0, 2.0
METHODS = ("regression", "proportional")
VARIANTS: dict[str, dict] = {
    "regression": {},
    "regression_box45": {"instant_window_s": 0.045, "instant_kernel": ((1.0, 0.0, 1.0),)},
    "regression_fixedwindow": {},
    "regression_bins": {"bins": True},
    "regression_nobuffer": {"use_buffer": False},
    "regression_buffer": {"use_buffer": True},
    "regression_nolagfloor": {"buffer_lag_floor_sd_s": 0.0},
}
"""Regression settings evaluated with --variants: the defaults; the instant field read as the
45 ms boxcar measured on the H200 (`--instant-kernel box:45`); the buffer window's worth fixed
as tuned on V-JEPA2 (the neighbours' full move and ±25 %), not from the run's own residuals
(`regression_choice.WINDOW_FROM_RESIDUALS` off); long phases always cut into bins (on the
H200-like simulation bins with long gaps removed the window's bias: simulated_bins/); no power
buffer rows (on the simulation, a repeated phase is read through the counter, and the buffer's
unidentified window dilutes it: simulated_repeat/); the buffer rows kept wherever recorded, even
where the run repeated phases and the default (`attribution.repeat_rule`) leaves them out
(simulated_repeat_rule/); the buffer's lag carried in the intervals at its posterior σ alone,
as before the 0.8 ms floor (`buffer_lag_floor_sd_s`; ref_loops/lag_floor/)."""


def unpack(results: Path, work: Path) -> Path:
    """The directory holding loops/<loop>/: `results` itself, or `work` with the archives
    unpacked into it."""
    tars = sorted(results.glob("*.tar.gz"))
    if not tars:
        return results
    work.mkdir(parents=True, exist_ok=True)
    for t in tars:
        with tarfile.open(t) as tar:
            tar.extractall(work, filter="data")
    return work


def occurrences(fine_dir: Path, res) -> dict[str, int]:
    """How often each phase ran in the analysed steps of the fine run."""
    from jouleprof.store.rundir import RunDir

    spans = RunDir(fine_dir).read_spans()
    steps = sorted(spans["step"].unique())
    used = set(steps[res.warmup_steps : res.warmup_steps + res.n_steps])
    s = spans[spans["step"].isin(used)]
    return {str(k): int(v) for k, v in s.groupby("phase").size().items()}


def _attribute(fine_dir: Path, method: str, device: str, groups: tuple[str, ...] = ()):
    """The fine run attributed by `method` (a regression variant: `VARIANTS`), the `groups`
    the reference run left out at once weighed together (`--joint`)."""
    from jouleprof.attribution.api import attribute

    opts = dict(VARIANTS.get(method, {}))
    if groups and method.startswith("regression"):
        opts["joint"] = groups
    if method.startswith("regression") and device == "sim0":
        opts["bins"] = False  # simulated phases draw flat power
    base = "regression" if method.startswith("regression") else method
    import jouleprof.attribution.regression_choice as rc

    before = rc.WINDOW_FROM_RESIDUALS
    rc.WINDOW_FROM_RESIDUALS = before and method != "regression_fixedwindow"
    try:
        return attribute(fine_dir, base, device=device, **opts).devices[0]
    finally:
        rc.WINDOW_FROM_RESIDUALS = before


def _fine_device(fine_dir: Path) -> str:
    from jouleprof.store.rundir import RunDir

    devs = set(RunDir(fine_dir).read_samples()["device"].astype(str))
    gpus = sorted(d for d in devs if d.startswith("gpu"))
    return gpus[0] if gpus else "sim0"


PACE_TOL = 0.25
"""A phase replayed alone whose time per call differs from its time in the measured steps by
more than this ran at another pace (launch-bound alone, throttled alone): not its reference."""


def _paced(ref, step_ms: float | None):
    """`ref`, its reference switched to the added one where the alone replay ran at another
    pace than the phase in the measured steps (and the added one exists), and to none where
    the added copies ran at another pace too (beyond PACE_TOL and their time's uncertainty,
    the plain windows' spread): neither was priced as the phase runs in its steps."""
    from dataclasses import replace

    if ref is None or step_ms is None or not ref.alone_ms or ref.added_j is None:
        return ref
    ratio = ref.alone_ms / step_ms
    if abs(ratio - 1) <= PACE_TOL or ref.ref_source == "added":
        return ref
    alone = f"alone it ran {ref.alone_ms:.3g} ms a call against {step_ms:.3g} ms in the steps"
    if ref.added_ms is not None:
        off = abs(ref.added_ms - step_ms) - (ref.added_ms_hw or 0.0)
        if off > PACE_TOL * step_ms:
            note = (
                f"{alone}, and each added copy {ref.added_ms:.3g} ± {ref.added_ms_hw or 0:.2g} "
                "ms: no reference at the steps' pace"
            )
            return replace(ref, ref_j=None, ref_lo_j=None, ref_hi_j=None,
                           ref_source="off pace", note=note)  # fmt: skip
    note = f"{alone}: the added reference (priced in its step) is used"
    return replace(ref, ref_j=ref.added_j, ref_lo_j=ref.added_lo_j, ref_hi_j=ref.added_hi_j,
                   ref_source="added (pace)", note=note)  # fmt: skip


def phase_rows(
    loop: str, method: str, res, occ: dict, refs: dict, target_rel: float, truth=None
) -> list:
    """One row per reported phase (joint rows too) of `res` against the references (and a
    simulated run's truth per occurrence, `truth`, where given)."""
    times_ms = {p.phase: 1e3 * p.time_s / occ[p.phase] for p in res.phases if occ.get(p.phase)}
    per_step_j = res.step_energy_j / res.n_steps if res.step_energy_j else None
    needs = {u["phase"]: u for u in res.diagnostics.get("steps_needed_unresolved", [])}
    rows = []
    for p in res.phases:
        if p.phase in ("idle", "untracked") or p.phase.startswith("<"):
            continue
        parts = p.phase.split("+")
        n_occ = occ.get(parts[0], 0)
        ref = [_paced(refs["phases"].get(q), times_ms.get(q)) for q in parts]
        have = all(r is not None and r.ref_j is not None for r in ref) and n_occ
        ref_j = sum(r.ref_j for r in ref) if have else None
        # The share only sorts the phase into the target's classes: without a reference it
        # comes from the larger of the two ways (the class it could be in, at the most).
        share_j, share_from = ref_j, "reference"
        if ref_j is None and n_occ and all(ref):
            ways = [max(r.alone_j or 0.0, r.added_j or 0.0) for r in ref]
            share_j, share_from = (sum(ways), "max(alone, added)") if sum(ways) > 0 else (None, "")
        removed = _removed_of(ref, parts, refs)
        row = {
            "loop": loop,
            "method": method,
            "phase": p.phase,
            "occ_per_step": n_occ / res.n_steps if res.n_steps else None,
            "time_ms": 1e3 * p.time_s / n_occ if n_occ else None,
            "ref_alone_ms": _sum([r.alone_ms for r in ref]) if all(ref) else None,
            "ref_alone_j": _sum([r.alone_j for r in ref]) if all(ref) else None,
            "ref_added_j": _sum([r.added_j for r in ref]) if all(ref) else None,
            "ref_added_ms": _sum([r.added_ms for r in ref]) if all(ref) else None,
            # A joint row's own "step less it" is the step less all its members at once
            # (`removed_groups`); the members' summed would count what they share twice.
            "ref_removed_j": removed[0],
            "ref_removed_ms": removed[1],
            "ref_diff_pct": ref[0].diff_pct if len(ref) == 1 and ref[0] else None,
            "near_limit": any(r.near_limit for r in ref if r),
            "max_read_w": max((r.max_read_w or 0) for r in ref if r) if any(ref) else None,
            "ref_j": ref_j,
            "ref_source": "+".join(r.ref_source for r in ref if r),
            "ref_note": "; ".join(r.note for r in ref if r and r.note),
            "share_pct": 100 * share_j * n_occ / res.n_steps / per_step_j
            if share_j and per_step_j
            else None,
            "share_from": share_from,
            "resolved": bool(p.resolved),
            "estimate_j": p.energy_j / n_occ if p.resolved and n_occ else None,
            "lo_j": p.energy_lo_j / n_occ if p.resolved and n_occ else None,
            "hi_j": p.energy_hi_j / n_occ if p.resolved and n_occ else None,
            "note": p.note,
        }
        if row["estimate_j"] is not None and ref_j:
            row["error_pct"] = 100 * (row["estimate_j"] - ref_j) / ref_j
            row["half_width_pct"] = 50 * (row["hi_j"] - row["lo_j"]) / row["estimate_j"]
            row["inside"] = bool(row["lo_j"] <= ref_j <= row["hi_j"])
            # The reference has a bound of its own (its windows' counter and timing).
            rlo = _sum([r.ref_lo_j for r in ref]) if all(ref) else None
            rhi = _sum([r.ref_hi_j for r in ref]) if all(ref) else None
            if rlo is not None and rhi is not None:
                row["overlaps_ref_bound"] = bool(row["lo_j"] <= rhi and rlo <= row["hi_j"])
        if len(parts) > 1 and row["ref_removed_j"] is not None and n_occ:
            # the group was left out of the plain step, which runs each member once; where the
            # loop repeats a member, its repeats (after itself) count at its reference
            repeats = repeats_at_reference(
                [(occ.get(q, 0) / n_occ, r and r.ref_j) for q, r in zip(parts, ref, strict=True)]
            )
            row["ref_removed_j"] = None if repeats is None else row["ref_removed_j"] + repeats
        removed = row["ref_removed_j"]
        if row["estimate_j"] is not None and removed:  # the third way, where measured
            row["removed_error_pct"] = 100 * (row["estimate_j"] - removed) / removed
            row["inside_removed"] = bool(row["lo_j"] <= removed <= row["hi_j"])
        if truth is not None and all(q in truth for q in parts) and row["estimate_j"] is not None:
            t = sum(truth[q] for q in parts)
            row["sim_truth_j"] = t
            row["sim_error_pct"] = 100 * (row["estimate_j"] - t) / t
            row["sim_truth_inside"] = bool(row["lo_j"] <= t <= row["hi_j"])
        u = needs.get(p.phase)
        if u is not None:
            row["steps_to_resolve"] = u["steps_to_resolve"]
            row["seconds_to_resolve"] = u["seconds_to_resolve"]
            row["steps_to_target"] = u["steps_to_target"]
            row["not_by_steps"] = not_by_steps(u)
        rows.append(row)
    return rows


def _removed_of(ref, parts: list[str], refs: dict) -> tuple[float | None, float | None]:
    """A row's "step less it" reference, (J, ms) per occurrence: a phase's own, or for a joint
    row the group's measured removal (`removed_groups`: (J, lo, hi, ms)), in either member
    order; Nones where not made."""
    if len(parts) == 1:
        r = ref[0]
        return (None, None) if r is None else (r.removed_j, r.removed_ms)
    for name, (e, _lo, _hi, ms) in (refs.get("removed_groups") or {}).items():
        if set(name.split("+")) == set(parts) and e is not None:
            return e, ms
    return None, None


def repeats_at_reference(members: list[tuple[float, float | None]]) -> float | None:
    """The energy of a group's members' repeats, each at its reference: Σ (occ − 1) × ref over
    the members run occ > 1 times for each time the plain step runs them (the repeats run
    after themselves, sharing nothing with the others); None where a repeated member has no
    reference. `members`: (occ, ref J) each."""
    if any(o > 1.0 and r is None for o, r in members):
        return None
    return sum((o - 1.0) * r for o, r in members if o > 1.0)


def _sum(values):
    return None if any(v is None for v in values) else float(sum(values))


def target(loop: str, rows: list[dict], target_pct: float, method: str = "regression") -> dict:
    """The issue's target for one loop's rows of `method` (module docstring)."""
    reg = [
        r
        for r in rows
        if r["method"] == method and "+" not in r["phase"] and r["phase"] != "excite_gap"
    ]
    fails, notes = [], []
    for r in reg:
        share = r.get("share_pct")
        if share is None or share != share:  # None or NaN
            if r["ref_j"] is None:
                fails.append(f"{r['phase']}: no reference")
            continue
        held = r.get("inside") or r.get("overlaps_ref_bound")
        if share >= BIG_PCT and r["ref_j"] is None:
            fails.append(f"{r['phase']} (≤ {share:.0f} %): no reference ({r.get('ref_note')})")
        elif share >= BIG_PCT:
            ok = r["resolved"] and abs(r.get("error_pct", np.inf)) <= target_pct and held
            if not ok:
                why = (
                    "unresolved"
                    if not r["resolved"]
                    else f"{r['error_pct']:+.1f} % ±{r['half_width_pct']:.1f} %"
                    + ("" if held else ", reference (and its bound) outside")
                )
                fails.append(f"{r['phase']} ({share:.0f} %): {why}")
        elif share >= SMALL_PCT and not r["resolved"] and not r.get("steps_to_resolve"):
            if r.get("not_by_steps"):
                notes.append(f"{r['phase']} ({share:.0f} %): unresolved, steps alone cannot")
            else:
                fails.append(f"{r['phase']} ({share:.0f} %): unresolved without the steps it needs")
    return {"loop": loop, "method": method, "met": not fails, "fails": "; ".join(fails),
            "notes": "; ".join(notes)}  # fmt: skip


def evaluate(
    base: Path, meta: dict, target_pct: float, methods=METHODS
) -> tuple[list[dict], list[dict], dict]:
    limit = meta.get("power_limit_w")
    rows, targets, extra = [], [], {}
    loops_dir = base / "loops"
    names = sorted(p.name for p in loops_dir.iterdir() if (p / "fine").is_dir())
    ref_cache = {}
    for name in names:
        d = loops_dir / name
        try:
            ref_dir = reference_dir(loops_dir, name)
            if ref_dir not in ref_cache:
                ref_cache[ref_dir] = references(ref_dir, limit)
            refs = ref_cache[ref_dir]
            dev = _fine_device(d / "fine")
            groups = tuple(refs.get("removed_groups") or ())
            loop_rows = []
            for method in methods:
                res = _attribute(d / "fine", method, dev, groups)
                occ = occurrences(d / "fine", res)
                truth = _sim_truth(d / "fine")
                loop_rows += phase_rows(name, method, res, occ, refs, target_pct / 100, truth)
                if method.startswith("regression"):
                    extra[f"{name} {method}"] = {
                        "n_steps": res.n_steps,
                        "step_ms": 1e3 * res.step_time_s,
                        "device": dev,
                        "notes": res.notes,
                        "fitted_power_w": res.diagnostics.get("fitted_power_w"),
                        "ceiling": None,
                    }
                    extra[f"{name} {method}"].update(_excite(d / "fine", res))
                    extra[f"{name} {method}"]["buffer_window_choice"] = res.diagnostics.get(
                        "buffer_window_choice"
                    )
                    extra[f"{name} {method}"]["buffer_window_delta_chi2"] = window_chi2(res)
                    extra[f"{name} {method}"]["buffer_lag_profile"] = (
                        res.diagnostics.get("buffer") or {}
                    ).get("lag_profile")
                    extra[f"{name} {method}"]["ref_closure"] = closure(refs, res, occ)
                    extra[f"{name} {method}"]["references_from"] = str(
                        ref_dir.relative_to(loops_dir)
                    )
            rows += loop_rows
            for method in methods:
                if method != "proportional":
                    t = target(name, [r for r in loop_rows if r["method"] == method], target_pct,
                               method)  # fmt: skip
                    targets.append(t)
        except Exception as e:  # noqa: BLE001 — a loop that cannot be evaluated is a row
            why = f"{type(e).__name__}: {e}"
            targets.append({"loop": name, "method": "", "met": False, "fails": why})
    return rows, targets, extra


def reference_dir(loops_dir: Path, name: str) -> Path:
    """The reference run of loop `name`: its own ref/; for an excited loop `<base>_excite` or
    `<base>_edges` without one, its base loop's (loops/<base>/ref) in the same results. Raises
    FileNotFoundError, saying what is missing, where there is neither."""
    own = loops_dir / name / "ref"
    if own.is_dir():
        return own
    base = base_of(name)
    if base == name:
        raise FileNotFoundError(f"no references: {name} has no ref/ run ({own})")
    theirs = loops_dir / base / "ref"
    if theirs.is_dir():
        return theirs
    raise FileNotFoundError(
        f"no references for the excited loop {name}: it has no ref/ of its own and its base "
        f"loop {base} has no {base}/ref in {loops_dir} (run {base} in the same call, or "
        f"{name} without it, which then makes its own references)"
    )


def not_by_steps(need: dict) -> bool:
    """Whether the attribution said that more steps alone cannot resolve this unresolved phase
    (`steps_needed.UnresolvedNeed` as JSON, read by its own rule)."""
    from jouleprof.attribution.steps_needed import UnresolvedNeed

    return UnresolvedNeed(**need).more_steps_cannot


def closure(refs: dict, res, occ: dict) -> dict:
    """The references against the plain replayed cycle's energy: Σ phase reference × its
    occurrences per cycle, plus the cycle's time outside the phases (the plain cycle's time
    less the phases' time in the measured steps) at the idle power, over the plain cycle's
    energy. A check of the references as a set (they price each phase in other conditions
    than its steps: alone, or added); phases without a reference are listed, not summed."""
    cyc = {p: r.occ for p, r in refs["phases"].items()}
    times = {p.phase: 1e3 * p.time_s / occ[p.phase] for p in res.phases if occ.get(p.phase)}
    summed, missing, phase_ms = 0.0, [], 0.0
    for p, r in refs["phases"].items():
        rr = _paced(r, times.get(p))
        phase_ms += times.get(p, 0.0) * cyc[p]
        if rr.ref_j is None:
            missing.append(p)
        else:
            summed += rr.ref_j * cyc[p]
    gap_ms = max(refs["plain_cycle_ms"] - phase_ms, 0.0)
    gap_j = (refs["idle_w"] or 0.0) * gap_ms / 1e3
    plain = refs["plain_cycle_j"]
    return {"plain_cycle_j": plain, "plain_cycle_ms": refs["plain_cycle_ms"],
            "refs_j": summed, "gap_ms": gap_ms, "gap_at_idle_j": gap_j,
            "refs_over_plain_pct": 100 * (summed + gap_j) / plain if plain else None,
            "without_reference": missing,
            "removed_over_plain_pct": _removed_pct(refs, gap_j)}  # fmt: skip


def _removed_pct(refs: dict, gap_j: float) -> float | None:
    """The third references (the step less the phase) summed over the cycle, with the time
    outside the phases at idle, over the plain cycle's energy; None unless every phase has
    one."""
    phases = refs["phases"].values()
    plain = refs["plain_cycle_j"]
    if not plain or not phases or any(r.removed_j is None for r in phases):
        return None
    return 100 * (sum(r.removed_j * r.occ for r in phases) + gap_j) / plain


def window_chi2(res) -> dict[str, float]:
    """Per neighbouring buffer-window length of the chosen one (ms → Δχ²): the residuals' excess
    over the chosen length's, in independent blocks of rows, as the regression weighs the
    neighbours' moves (`regression_choice.window_support`, above WINDOW_CLEAR_CHI2 = 9: the
    run rejects that length); {} where the fit chose no window."""
    import jouleprof.attribution.regression_choice as rc

    choice = res.diagnostics.get("buffer_window_choice") or {}
    rms = {float(k): float(v) for k, v in (choice.get("residual_rms_w") or {}).items()}
    best = choice.get("window_s")
    if best is None or not rms:
        return {}
    tried = sorted(rms)
    i = min(range(len(tried)), key=lambda j: abs(tried[j] - best))
    search = SimpleNamespace(
        rms=rms, best=tried[i], neighbours=[tried[j] for j in (i - 1, i + 1) if 0 <= j < len(tried)]
    )
    return {f"{1e3 * w:.0f}": c for w, c in rc.window_support(search, rc.n_blocks(res)).items()}


def _sim_truth(fine_dir: Path) -> dict | None:
    """A simulated loop's true energy per occurrence of each phase (ref_loops_sim.py)."""
    rec = json.loads((fine_dir / "run.json").read_text())
    return rec.get("extra", {}).get("simulated_truth_j_per_occ")


def _excite(fine_dir: Path, res) -> dict:
    from jouleprof.attribution.excitation import overhead
    from jouleprof.store.rundir import RunDir

    rd = RunDir(fine_dir)
    if "excite" not in rd.read_record().extra:
        return {}
    return {"excite": overhead(rd.read_spans(), res)}


def markdown(rows: list[dict], targets: list[dict]) -> str:
    cols = ["loop", "method", "phase", "share_pct", "time_ms", "ref_alone_ms", "ref_added_ms",
            "ref_alone_j", "ref_added_j", "ref_source", "ref_j",
            "estimate_j", "error_pct", "half_width_pct", "inside", "overlaps_ref_bound",
            "ref_removed_j", "removed_error_pct", "inside_removed",
            "resolved", "steps_to_resolve", "not_by_steps", "sim_error_pct",
            "sim_truth_inside"]  # fmt: skip
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    out += ["", "| loop | method | target met | why not | also |", "|---|---|---|---|---|"]
    out += [
        f"| {t['loop']} | {t.get('method', '')} | {'yes' if t['met'] else 'no'} | {t['fails']} "
        f"| {t.get('notes', '')} |"
        for t in targets
    ]
    return "\n".join(out) + "\n"


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="default: RESULTS_DIR/eval")
    ap.add_argument("--target-pct", type=float, default=5.0)
    ap.add_argument("--variants", action="store_true", help=f"also {', '.join(VARIANTS)}")
    ap.add_argument(
        "--methods",
        default=None,
        help="comma-separated methods and variants to evaluate (default: regression, "
        "proportional, and the variants with --variants)",
    )
    ap.add_argument(
        "--sensor",
        type=Path,
        default=None,
        help="a sensor file (jouleprof attribute --save-sensor): adds the variant "
        "regression_sensor, the regression with that file's buffer lag as the prior",
    )
    args = ap.parse_args(argv)
    if args.sensor is not None:
        from jouleprof.attribution.sensor_file import SensorFileError, read_sensor

        try:
            VARIANTS["regression_sensor"] = read_sensor(args.sensor).options()
        except SensorFileError as e:
            ap.error(str(e))
    if not (args.results / "meta.json").is_file():
        ap.error(f"{args.results} has no meta.json: give a benchmarks/ref_loops.py --out dir")
    out = args.out or args.results / "eval"
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((args.results / "meta.json").read_text())
    base = unpack(args.results, out / "unpacked")
    methods = (
        METHODS + tuple(v for v in VARIANTS if v != "regression") if args.variants else METHODS
    )
    if args.methods:
        methods = tuple(m for m in args.methods.split(",") if m)
        bad = [m for m in methods if m not in METHODS and m not in VARIANTS]
        if bad:
            ap.error(f"unknown method(s) {bad}: choose from {', '.join((*METHODS, *VARIANTS))}")
    rows, targets, extra = evaluate(base, meta, args.target_pct, methods)
    pd.DataFrame(rows).to_csv(out / "ref_loops_eval.csv", index=False)
    pd.DataFrame(targets).to_csv(out / "targets.csv", index=False)
    (out / "loops_detail.json").write_text(json.dumps(extra, indent=2, default=str) + "\n")
    md = markdown(rows, targets)
    (out / "ref_loops_eval.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
