"""What window does each sample of NVML's power buffer average, and when? An offline fit.

`jouleprof measure/profile --power-buffer` (and kernel_probe.py) copy the driver's power
samples, one every ~20 ms, to power_buffer.csv. Before the regression can use them as rows it
needs their model: a sample stamped t is taken to be the mean power over [t − lag − w, t − lag].
This scans w and lag: for each pair, every sample is an equation Σ_phase P_phase × (its share of
that window) = the sample's watts, the phase powers are fitted by non-negative least squares,
and the residual RMS says how well (w, lag) explains the samples. Sharp, recorded phase edges
(kernel_probe.py's bursts) make the minimum clear.

    PYTHONPATH=src python3 benchmarks/buffer_window.py RUN_DIR [--device gpu0]
        [--windows-ms 5:60:5] [--lags-ms -40:40:5] [--json OUT.json]

Prints the best (w, lag), its residual and phase powers, and the residual over the grid's
windows at the best lag.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from jouleprof.attribution.common import EXCLUDED, build_timeline
from jouleprof.attribution.placement import fit_powers
from jouleprof.sensors.nvml_buffer import POWER_BUFFER_CSV


def grid_ms(spec: str) -> np.ndarray:
    """ "a:b:step" (inclusive of b) in ms → seconds."""
    a, b, step = (float(x) for x in spec.split(":"))
    return np.arange(a, b + step / 2, step) / 1e3


def fit_windows(
    buffer: pd.DataFrame, spans: pd.DataFrame, windows_s, lags_s, device: str = "gpu0"
) -> dict:
    """Residual RMS (W) and phase powers for every (window, lag); the best pair."""
    pb = buffer[buffer["device"].astype(str) == device]
    t = pb["t_s"].to_numpy(float)
    y = pb["power_w"].to_numpy(float)
    tl = build_timeline(spans, float(t.min()) - 1.0, float(t.max()) + 1.0, warmup_steps=0)
    r0, r1 = tl.region_s
    cols = [j for j, nm in enumerate(tl.names) if nm not in EXCLUDED]
    grid = []
    for lag in lags_s:
        for w in windows_s:
            t1 = t - lag
            t0 = t1 - w
            keep = (t0 >= r0) & (t1 <= r1)
            if keep.sum() < 2 * len(cols):
                continue
            x = tl.overlap_s(t0[keep], t1[keep])[:, cols] / w
            p = fit_powers(x, y[keep])
            res = float(np.sqrt(np.mean((y[keep] - x @ p) ** 2)))
            grid.append(
                {
                    "window_ms": 1e3 * w,
                    "lag_ms": 1e3 * lag,
                    "n": int(keep.sum()),
                    "residual_w": res,
                    "power_w": {tl.names[j]: float(p[k]) for k, j in enumerate(cols)},
                }
            )
    if not grid:
        raise SystemExit("no buffer sample's window falls inside the recorded steps")
    best = min(grid, key=lambda g: g["residual_w"])
    return {"device": device, "n_samples": len(t), "best": best, "grid": grid}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="gpu0")
    ap.add_argument("--windows-ms", default="5:60:5")
    ap.add_argument("--lags-ms", default="-40:40:5")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    buffer = pd.read_csv(a.run / POWER_BUFFER_CSV)
    spans = pd.read_csv(a.run / "spans.csv")
    out = fit_windows(buffer, spans, grid_ms(a.windows_ms), grid_ms(a.lags_ms), a.device)
    b = out["best"]
    print(
        f"{out['n_samples']} samples; best window {b['window_ms']:.0f} ms at lag "
        f"{b['lag_ms']:+.0f} ms: residual {b['residual_w']:.1f} W; "
        + ", ".join(f"{k} {v:.0f} W" for k, v in b["power_w"].items())
    )
    for g in out["grid"]:
        if g["lag_ms"] == b["lag_ms"]:
            print(f"  window {g['window_ms']:5.0f} ms: residual {g['residual_w']:7.1f} W")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
