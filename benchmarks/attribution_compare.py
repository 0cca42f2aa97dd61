"""Compare a fine run's phase attribution methods against the isolation reference.

Reads RUN_DIR/phases_{proportional,regression,isolation}.csv (written by `jouleprof profile
--isolation-s ...`), sums nested phases into their top-level phase ("forward/target" →
"forward"), and reports, per phase: each method's energy per step, its difference from
isolation in percent, and the phase's share of step energy. Checks the issue's target:
regression within 5 % of isolation for every phase holding ≥ 2 % of step energy.

Also checks the reference itself: a replay is faithful when it takes as long per call as the
phase takes inside training steps (within 10 %); the sum of the isolated phases is compared with
the measured energy of a step (the proportional split's total). For a phase whose replay is not
faithful it gives a second reference: the measured step less every other phase's isolated
energy (`difference_j`), and the power the replay's extra time drew.

Where the run replayed a loop that over-determines a phase ("forward+backward+optimizer"), it
also reports that phase priced where it runs in a step (`in_place_j`: for the optimizer,
forward+backward+optimizer − forward+backward per call, times its calls per step; bound by
interval arithmetic), the regression against it, and its time per call against the phase's
time inside the steps. The isolation figures (and the 5 % target) stay those of the phase
replayed alone.

Usage: python benchmarks/attribution_compare.py RUN_DIR [--regression FILE] [--json OUT.json]

`--regression FILE` compares another regression result kept in the run directory (e.g.
phases_regression_auto.csv, rebuilt offline) in place of phases_regression.csv.
`--rebuild NAME [--set FIELD=VALUE ...]` first rebuilds it offline with the current code
(`jouleprof.attribution.attribute(RUN, "regression", warmup_steps=0, FIELD=VALUE, ...)`, as
a cell does, any RegressionConfig field; VALUE true/false/none or a number, or for
buffer_kernel and instant_kernel a spec such as exp:12, box:24, tri:34 that sets the window
too) into
RUN/phases_regression_NAME.csv, and compares that.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

METHODS = ("proportional", "regression", "isolation")


DEVICE = "gpu0"
"""The device compared (a run measuring several GPUs has rows for each)."""


def per_step(run_dir: Path, method: str, name: str | None = None) -> pd.DataFrame | None:
    """Energy (with bounds) and time per step of each top-level phase: a parent's own share
    plus its children's ("forward" = "forward" + "forward/target" + "forward/context"), from
    `name` in `run_dir` (default phases_{method}.csv). The bounds are summed (the widest the
    parts allow); `half_width_j` is the parts' half-widths in quadrature."""
    p = run_dir / (name or f"phases_{method}.csv")
    if not p.is_file():
        return None
    df = pd.read_csv(p)
    if "device" in df.columns:
        df = df[df["device"].astype(str) == DEVICE]
    df = df[~df["phase"].isin(["total", "idle", "untracked", "outside"])].copy()
    df["top"] = df["phase"].astype(str).str.split("/").str[0]
    steps = df["time_s"] / df["time_per_step_s"]
    df["energy_per_step_j"] = df["energy_j"] / steps
    df["lo_per_step_j"] = df["energy_lo_j"] / steps
    df["hi_per_step_j"] = df["energy_hi_j"] / steps
    df["hw2"] = ((df["hi_per_step_j"] - df["lo_per_step_j"]) / 2) ** 2
    cols = ["energy_per_step_j", "lo_per_step_j", "hi_per_step_j", "time_per_step_s", "hw2"]
    out = df.groupby("top")[cols].sum(min_count=1)
    out["half_width_j"] = np.sqrt(out.pop("hw2"))
    return out


def replay_times(run_dir: Path) -> dict[str, float]:
    """Seconds per call of each phase as replayed alone (backward = forward+backward − forward)."""
    p = run_dir / "isolation_windows.csv"
    if not p.is_file():
        return {}
    # Repeated loops of one replay (`--isolation-repeats`): their mean time per call.
    w = pd.read_csv(p).groupby("replay")["time_per_call_s"].mean().to_dict()
    out = {k: float(v) for k, v in w.items() if k in ("forward", "optimizer", "ema")}
    if "forward+backward" in w and "forward" in w:
        out["backward"] = float(w["forward+backward"] - w["forward"])
    return out


def in_place_per_call(run_dir: Path) -> tuple[dict, dict]:
    """(in place, isolated): each phase's energy per call where an over-determining loop
    prices it where it runs (`isolation.in_place_energies`), and the main system's isolated
    figures; ({}, {}) where the run has no such loop. The loops come from isolation.csv, else
    from isolation_windows.csv measured on samples.csv (read only when such a loop exists)."""
    from jouleprof.attribution import isolation as iso
    from jouleprof.store.isolation import read_isolation_windows

    if (run_dir / iso.ISOLATION_CSV).is_file():
        loops = iso.read_isolation_csv(run_dir)
    elif (run_dir / iso.WINDOWS_CSV).is_file():
        windows = read_isolation_windows(run_dir / iso.WINDOWS_CSV)
        shapes = [iso.IsolationResult(w.replay, w.n_calls, 1.0, 0.0, 0.0, 0.0) for w in windows]
        if not iso.split_loops(shapes)[1]:
            return {}, {}
        from jouleprof.store.rundir import RunDir

        samples = RunDir(run_dir).read_samples()
        loops = iso.results_from_windows(samples, run_dir / iso.WINDOWS_CSV, DEVICE)
    else:
        return {}, {}
    loops = [r for r in loops if r.device == DEVICE]
    return iso.in_place_energies(loops), iso.per_call_energies(loops)


def _in_place(out: dict, run_dir: Path, inside: dict[str, float]) -> None:
    """Add the in-place reference (module docstring) to the rows of the phases that have one."""
    in_place, isolated = in_place_per_call(run_dir)
    for phase, c in in_place.items():
        row = out["phases"].get(phase)
        alone = isolated.get(phase)
        if row is None or alone is None or not alone.energy_j or not row.get("isolation_j"):
            continue
        calls = row["isolation_j"] / alone.energy_j  # calls per step
        v = calls * c.energy_j
        row["in_place_j"] = v
        row["in_place_lo_j"] = calls * c.energy_lo_j
        row["in_place_hi_j"] = calls * c.energy_hi_j
        row["in_place_derived_from"] = c.derived_from
        row["in_place_vs_isolation_pct"] = 100 * (v / row["isolation_j"] - 1)
        if row.get("regression_j") is not None and v:
            row["regression_vs_in_place_pct"] = 100 * (row["regression_j"] / v - 1)
        row["in_place_s"] = c.time_s
        if inside.get(phase):
            row["in_place_time_ratio"] = c.time_s / inside[phase]


def compare(run_dir: Path, regression: str | None = None) -> dict:
    """The comparison (module docstring); `regression`: the regression's file name in
    `run_dir` (default phases_regression.csv)."""
    tables = {m: per_step(run_dir, m, regression if m == "regression" else None) for m in METHODS}
    iso = tables["isolation"]
    out: dict = {
        "run_dir": str(run_dir),
        "regression_file": regression or "phases_regression.csv",
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
    # Rows the regression could only weigh jointly ("optimizer+ema"): against the members'
    # isolated sum (reported beside, not counted for the per-phase target).
    reg = tables["regression"]
    for joint in [] if reg is None else [p for p in reg.index if "+" in p]:
        members = joint.split("+")
        if all(m in iso.index and pd.notna(iso.loc[m, "energy_per_step_j"]) for m in members):
            ref = float(iso.loc[members, "energy_per_step_j"].sum())
            v = float(reg.loc[joint, "energy_per_step_j"])
            out["phases"][joint] = {
                "isolation_j": ref,
                "share_pct": 100 * ref / total if total else None,
                "regression_j": v,
                "regression_vs_isolation_pct": 100 * (v / ref - 1) if ref else None,
                "joint": True,
            }
    out["regression_meets_target"] = ok
    replay = replay_times(run_dir)
    prop = tables["proportional"]  # its time per step is each phase's time inside the steps
    inside = {} if prop is None else prop["time_per_step_s"].astype(float).to_dict()
    for phase, row in out["phases"].items():
        if phase in replay and inside.get(phase):
            row["replay_s"], row["in_step_s"] = replay[phase], inside[phase]
            row["replay_time_ratio"] = replay[phase] / inside[phase]
            row["replay_faithful"] = abs(row["replay_time_ratio"] - 1) <= 0.10
    _in_place(out, run_dir, inside)
    if prop is not None:
        step_j = float(prop["energy_per_step_j"].sum())
        out["measured_step_j"] = step_j
        out["isolation_sum_j"] = total
        out["isolation_sum_vs_measured_pct"] = 100 * (total / step_j - 1) if step_j else None
        _by_difference(out, iso, prop, step_j)
    return out


def _by_difference(out: dict, iso: pd.DataFrame, prop: pd.DataFrame, step_j: float) -> None:
    """A second reference for a phase whose replay is not faithful: the measured step energy
    less every other phase's isolated energy (the proportional split's for a phase that was
    not replayed, e.g. data). It carries the other replays' errors and none of its own; the
    gap to its isolated figure over the replay's extra time is the power that time drew."""
    iso_j = iso["energy_per_step_j"]
    for phase, row in out["phases"].items():
        if row.get("joint") or row.get("replay_faithful") is not False:
            continue
        others = [p for p in prop.index if p != phase]
        rest = sum(
            float(iso_j[p])
            if p in iso_j.index and pd.notna(iso_j[p])
            else float(prop.loc[p, "energy_per_step_j"])
            for p in others
        )
        diff = step_j - rest
        row["difference_j"] = diff
        row["not_replayed_j"] = sum(
            float(prop.loc[p, "energy_per_step_j"])
            for p in others
            if p not in iso_j.index or pd.isna(iso_j[p])
        )
        if row.get("regression_j") is not None:
            row["regression_vs_difference_pct"] = 100 * (row["regression_j"] / diff - 1)
        extra_s = row["replay_s"] - row["in_step_s"]
        if abs(extra_s) > 1e-6:
            row["replay_extra_s"] = extra_s
            row["replay_extra_power_w"] = (row["isolation_j"] - diff) / extra_s


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def rebuild(run_dir: Path, name: str, settings: list[str]) -> str:
    """Rebuild the run's regression offline into phases_regression_NAME.csv; its file name."""
    from jouleprof.attribution import attribute
    from jouleprof.attribution.kernels import parse_kernel
    from jouleprof.store.rundir import RunDir

    opts = {}
    for item in settings:
        key, sep, val = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes FIELD=VALUE, got {item!r}")
        if key in ("buffer_kernel", "instant_kernel"):
            # A spec such as exp:12 or box:24 (ms): the shape and its window.
            window_s, opts[key] = parse_kernel(val)
            opts[key.replace("kernel", "window_s")] = window_s
        else:
            opts[key] = _value(val)
    res = attribute(run_dir, "regression", warmup_steps=0, **opts)
    file = f"phases_regression_{name}.csv"
    RunDir(run_dir).write_phases(res.to_frame(), name=file)
    for dev in res.devices:
        for note in dev.notes:
            print(f"{dev.device}: {note}")
    return file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--regression", help="regression file in RUN_DIR (phases_regression.csv)")
    ap.add_argument("--rebuild", metavar="NAME", help="rebuild the regression offline first")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.rebuild:
        a.regression = rebuild(a.run_dir, a.rebuild, a.set)
    res = compare(a.run_dir, a.regression)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    cols = ("phase", "share%", "isol J", "regr J", "regr%", "prop J", "prop%", "replay/in")
    print(" ".join(f"{c:>9s}" for c in cols))
    fields = (
        ("share_pct", "9.1f"),
        ("isolation_j", "9.3f"),
        ("regression_j", "9.3f"),
        ("regression_vs_isolation_pct", "+9.1f"),
        ("proportional_j", "9.3f"),
        ("proportional_vs_isolation_pct", "+9.1f"),
        ("replay_time_ratio", "9.2f"),
    )
    for ph, r in res["phases"].items():
        cells = [format(r[k], fmt) if r.get(k) is not None else f"{'—':>9s}" for k, fmt in fields]
        print(f"{ph:>9s} " + " ".join(cells))
    print(
        "regression within 5% of isolation for phases ≥2% of energy:",
        res.get("regression_meets_target"),
    )
    for ph, r in res["phases"].items():
        if "difference_j" in r:
            print(
                f"{ph}: replay not faithful; step less the other phases' isolated energy gives "
                f"{r['difference_j']:.2f} J (regression "
                f"{r.get('regression_vs_difference_pct', float('nan')):+.1f} % of it); the "
                f"replay's {1e3 * r.get('replay_extra_s', 0):.1f} ms extra a call drew "
                f"{r.get('replay_extra_power_w', float('nan')):.0f} W"
            )
    for ph, r in res["phases"].items():
        if "in_place_j" in r:
            reg = r.get("regression_vs_in_place_pct")
            ratio = r.get("in_place_time_ratio")
            print(
                f"{ph} in place ({r['in_place_derived_from']}): {r['in_place_j']:.3f} J "
                f"[{r['in_place_lo_j']:.3f}, {r['in_place_hi_j']:.3f}] a step, "
                f"{r['in_place_vs_isolation_pct']:+.1f} % of its isolated replay; regression "
                + ("—" if reg is None else f"{reg:+.1f} %")
                + " of it; "
                + f"{1e3 * r['in_place_s']:.2f} ms a call"
                + ("" if ratio is None else f" ({ratio:.2f}× its time in the steps)")
            )
    if res.get("isolation_sum_vs_measured_pct") is not None:
        print(
            f"isolated phases sum to {res['isolation_sum_j']:.2f} J against "
            f"{res['measured_step_j']:.2f} J measured per step "
            f"({res['isolation_sum_vs_measured_pct']:+.1f} %)"
        )
    sys.exit(0)


if __name__ == "__main__":
    main()
