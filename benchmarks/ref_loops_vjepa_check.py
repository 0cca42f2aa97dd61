"""The V-JEPA2 results must hold: re-attribute the committed H200 runs (attr_vith_b8/run6-run11)
with the buffer window's worth from the run's residuals on and off, and say what moved.

    PYTHONPATH=src python3 benchmarks/ref_loops_vjepa_check.py --out DIR [--runs run6,...]
    PYTHONPATH=src python3 benchmarks/ref_loops_vjepa_check.py --out DIR --on FIELD=VALUE

With --on FIELD=VALUE (RegressionConfig fields, repeatable), "on" is the defaults with those
fields set and "off" the defaults: the check then says what that setting moves.

Writes DIR/vjepa2_check.json: per run, each phase's energy per step and half-width both ways,
whether every figure and note is identical, and the residual support of the buffer window's
neighbours (Δχ², the weights the rule gave them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("run6", "run7", "run8", "run9", "run10", "run11")


def _attribute(run_dir: Path, from_residuals: bool, **opts):
    import jouleprof.attribution.regression_choice as rc
    from jouleprof.attribution.api import attribute

    before = rc.WINDOW_FROM_RESIDUALS
    rc.WINDOW_FROM_RESIDUALS = from_residuals
    try:
        return attribute(run_dir, "regression", **opts).devices[0]
    finally:
        rc.WINDOW_FROM_RESIDUALS = before


def check(run_dir: Path, on_opts: dict | None = None) -> dict:
    t0 = time.process_time()
    if on_opts:
        on, off = _attribute(run_dir, True, **on_opts), _attribute(run_dir, True)
    else:
        on, off = _attribute(run_dir, True), _attribute(run_dir, False)
    rows = []
    same = on.notes == off.notes
    for a in on.phases:
        b = off.phase(a.phase)
        ident = (a.energy_j, a.energy_lo_j, a.energy_hi_j) == (
            b.energy_j,
            b.energy_lo_j,
            b.energy_hi_j,
        )
        same = same and ident and a.resolved == b.resolved
        rows.append({
            "phase": a.phase, "resolved": a.resolved, "identical": ident,
            "j_per_step": None if a.energy_j is None else a.energy_j / on.n_steps,
            "half_width_pct_on": None if a.rel_halfwidth is None else 100 * a.rel_halfwidth,
            "half_width_pct_off": None if b.rel_halfwidth is None else 100 * b.rel_halfwidth,
        })  # fmt: skip
    bwc = on.diagnostics.get("buffer_window_choice") or {}
    return {
        "run": run_dir.name,
        "n_steps": on.n_steps,
        "identical": same,
        "buffer_window_s": bwc.get("window_s"),
        "residual_rms_w": bwc.get("residual_rms_w"),
        "neighbour_weight": bwc.get("neighbour_weight"),
        "block_s": on.diagnostics.get("block_s"),
        "buffer_lag_fitted_s": (on.diagnostics.get("buffer") or {}).get("lag_fitted_s"),
        "phases": rows,
        "cpu_s": time.process_time() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--on", action="append", default=[], metavar="FIELD=VALUE")
    args = ap.parse_args(argv)
    on_opts = {k: float(v) for k, v in (o.split("=", 1) for o in args.on)}
    args.out.mkdir(parents=True, exist_ok=True)
    base = ROOT / "benchmarks" / "results" / "attr_vith_b8"
    out = []
    for run in args.runs.split(","):
        out.append(check(base / run, on_opts))
        print(f"{run}: {'identical' if out[-1]['identical'] else 'MOVED'}", flush=True)
    name = "vjepa2_check.json" if not on_opts else "vjepa2_check_" + "_".join(on_opts) + ".json"
    (args.out / name).write_text(
        json.dumps({"on": on_opts, "runs": out} if on_opts else out, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
