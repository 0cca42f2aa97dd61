"""V-JEPA2 runs (benchmarks/results/attr_vith_b8/RUN): the default regression with
RegressionConfig.floor_at_idle off and on, each phase's energy and interval against the run's
isolated replay (phases_isolation.csv), per step (the two count their steps apart). Run from
the repository root:

    PYTHONPATH=src python3 \
        benchmarks/results/ref_loops/h200/tried_floor_at_idle/vjepa2_floor.py run6 OUT.json

("forward" itself is the 9 ms of the forward outside its two sub-phases; the replay is of the
whole forward, which "forward (sum)" compares.)
"""

import json
import sys

import pandas as pd

from jouleprof.attribution.api import attribute

run, out_path = sys.argv[1], sys.argv[2]
d = f"benchmarks/results/attr_vith_b8/{run}"
iso_rows = pd.read_csv(f"{d}/phases_isolation.csv").set_index("phase")
iso = iso_rows["energy_j"] / iso_rows["n_steps"]  # J per step
forward = [f"forward/{s}" for s in ("target", "context")]
out = {}
for floor in (False, True):
    res = attribute(d, "regression", floor_at_idle=floor).devices[0]
    dg = res.diagnostics
    row = {
        "idle_w": dg["fitted_power_w"].get("idle"),
        "rms": dg["residual_rms_w"],
        "n_steps": res.n_steps,
        "phases": {},
    }
    phases = {p.phase: p for p in res.phases}
    for p in res.phases:
        e = None if p.energy_j is None else p.energy_j / res.n_steps
        parts = p.phase.split("+")  # a joint row's reference: its parts' sum
        ref = float(sum(iso[q] for q in parts)) if all(q in iso.index for q in parts) else None
        known = e is not None and ref is not None and not pd.isna(ref)
        row["phases"][p.phase] = {
            "e": e,  # J per step
            "err_pct": 100 * (e / ref - 1) if known else None,
            "inside": bool(p.energy_lo_j <= ref * res.n_steps <= p.energy_hi_j) if known else None,
            "hw_pct": None if e is None else 50 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j,
        }
    if all(phases.get(f) is not None and phases[f].energy_j is not None for f in forward):
        # The replay runs the whole forward: its two sub-phases' sum (no joint interval here).
        e = sum(phases[f].energy_j for f in forward) / res.n_steps
        row["phases"]["forward (sum)"] = {"e": e, "err_pct": 100 * (e / iso["forward"] - 1)}
    out[f"floor_at_idle={floor}"] = row
with open(out_path, "w") as f:
    json.dump(out, f, default=float, indent=1)
