"""Does the board's power draw trail the GPU's work? A scan over a time lag, offline.

The regression places every phase span on the sensor's clock as recorded. If the power the
sensor sees trails the work by a few milliseconds (the board's regulators, or the sensor's own
filtering, beyond the averaging windows the regression models), energy drawn by a phase is
booked to the phase after it: a short phase after a high-power one (the optimizer after the
backward) would come out too high and the long one too low, as measured on the H200
(results/attr_vith_b8). This script shifts every span by a lag δ, refits the regression and
prints the residual and the phase energies for each δ: a residual minimum away from 0 says the
data prefer a lag, and how the phase energies move with it says how much it matters.

    python3 benchmarks/lag_scan.py RUN_DIR [--lags-ms -12:12:2] [--json OUT.json]

Reads only the run directory (samples.csv, spans.csv, run.json; compare.json if present for
the isolation reference); writes nothing there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from jouleprof.attribution.api import attribute

PHASES = ("forward", "forward/target", "forward/context", "backward", "optimizer", "ema")


def _lags(spec: str) -> list[float]:
    lo, hi, step = (float(x) for x in spec.split(":"))
    return [round(x, 6) for x in np.arange(lo, hi + step / 2, step)]


def _shifted_copy(run: Path, lag_s: float, tmp: Path) -> Path:
    out = tmp / f"lag{lag_s * 1e3:+.1f}ms"
    out.mkdir()
    for name in ("samples.csv", "run.json", "steps.csv"):
        if (run / name).is_file():
            shutil.copy(run / name, out / name)
    spans = pd.read_csv(run / "spans.csv")
    spans["t0_s"] += lag_s
    spans["t1_s"] += lag_s
    spans.to_csv(out / "spans.csv", index=False)
    return out


def scan(run: Path, lags_ms: list[float], warmup_steps: int = 0) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for lag_ms in lags_ms:
            rd = _shifted_copy(run, lag_ms / 1e3, Path(d))
            # One power per phase (no bins): bins would absorb part of a misalignment.
            res = attribute(rd, "regression", warmup_steps=warmup_steps, bins=False).devices[0]
            diag = res.diagnostics
            row: dict = {
                "lag_ms": lag_ms,
                "residual_rms_w": diag["residual_rms_w"],
                **{f"residual_{k}_w": v["residual_rms_w"] for k, v in diag["rows"].items()},
                "instant_window_ms": 1e3 * diag["instant_window_fitted_s"],
            }
            for p in res.phases:
                if p.phase in PHASES or "+" in p.phase:
                    n = max(p.n_steps, 1)
                    row[f"{p.phase}_j"] = p.energy_j / n if p.energy_j is not None else None
            rows.append(row)
            print(
                f"lag {lag_ms:+6.1f} ms  residual {row['residual_rms_w']:7.2f} W  "
                + "  ".join(f"{k[:-2]} {v:.2f}" for k, v in row.items() if k.endswith("_j") and v),
                flush=True,
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--lags-ms", default="-12:12:2", help="LO:HI:STEP in ms")
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = scan(a.run, _lags(a.lags_ms), a.warmup_steps)
    ref = {}
    cmp_path = a.run / "compare.json"
    if cmp_path.is_file():
        cmp = json.loads(cmp_path.read_text(), parse_constant=lambda c: None)
        ref = {k: v.get("isolation_j") for k, v in cmp["phases"].items()}
        print("isolation (J per step):", {k: round(v, 2) for k, v in ref.items() if v})
    best = min(rows, key=lambda r: r["residual_rms_w"])
    print(f"smallest residual at lag {best['lag_ms']:+.1f} ms")
    if a.json:
        a.json.write_text(
            json.dumps({"run": str(a.run), "scan": rows, "isolation_j": ref}, indent=1)
        )


if __name__ == "__main__":
    main()
