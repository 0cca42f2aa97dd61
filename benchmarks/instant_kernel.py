"""Which averaging kernel does the instant power field apply? An offline test on a fine run.

The regression models a power_instant_w reading as the mean power over a fixed window before
its refresh (a boxcar; fitted ~37 ms on the H200, published ~25 ms). If the field is in fact a
smoother filter (say, exponential), short phases next to a high-power one would be misplaced.
This script refits a run's phase powers with the counter rows plus the instant rows under each
candidate kernel — boxcars of several lengths, exponentials of several time constants, a
triangle — and prints the instant rows' residual and the phase energies per step: the kernel
the data prefer has the smallest instant residual. The counter rows (exact energy between
refreshes) keep every fit honest.

    PYTHONPATH=src python3 benchmarks/instant_kernel.py RUN_DIR [--json OUT.json]

A simplified fit (no grid refinement, two-pass weights), for comparing kernels, not a
replacement for `jouleprof attribute`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from jouleprof.attribution.common import EXCLUDED, build_timeline
from jouleprof.attribution.grid import device_grids
from jouleprof.attribution.kernels import parse_kernel
from jouleprof.attribution.placement import fit_powers, kernel_fractions
from jouleprof.attribution.rows import COUNTER, INSTANT, sensor_rows
from jouleprof.store.rundir import RunDir

SPECS = (
    "box:15", "box:25", "box:37", "box:50", "box:75", "box:100", "box:150",
    "exp:10", "exp:20", "exp:30", "exp:50",
    "tri:60", "tri:100", "tri:150",
)  # fmt: skip
KERNELS = {spec.replace(":", ""): parse_kernel(spec) for spec in SPECS}
"""name → (window in seconds, boxes in units of the window), as the regression takes them."""


def fit_kernels(run: Path, kernels: dict | None = None) -> dict:
    rd = RunDir(run)
    samples = rd.read_samples()
    spans = rd.read_spans()
    devices = sorted(set(samples["device"]))
    device = "gpu0" if "gpu0" in devices else devices[0]  # sim0: a kernel_probe --cpu-dry-run
    dev = samples[samples["device"] == device]
    tl = build_timeline(spans, float(dev["t_s"].min()), float(dev["t_s"].max()), warmup_steps=0)
    grids, _ = device_grids(samples, dev)
    jc, jp = grids["counter"], grids["power"]
    rows = sensor_rows(
        dev,
        {COUNTER: jc.grid, INSTANT: jp.grid},
        counter_weight=1.0,
        instant=(0.025, 1.0),
        average=None,
    )
    r0, r1 = tl.region_s
    inside = (rows.t0_s >= max(tl.edges_s[0], r0)) & (rows.t1_s <= min(tl.edges_s[-1], r1))
    rows = rows.select(inside)
    cols = [j for j, nm in enumerate(tl.names) if nm not in EXCLUDED]
    c, i = rows.kind == COUNTER, rows.kind == INSTANT
    sig = rows.row_sigma_s(np.array([jc.jitter_s, jp.jitter_s, jp.jitter_s]))
    xc = tl.overlap_s(rows.t0_s[c], rows.t1_s[c], sig[c]) / rows.duration_s[c][:, None]
    out = {}
    for name, (window_s, boxes) in (kernels or KERNELS).items():
        xi = kernel_fractions(tl, rows.t1_s[i], window_s, boxes, sig[i])
        x = np.vstack([xc, xi])[:, cols]
        y = np.concatenate([rows.power_w[c], rows.power_w[i]])
        w = np.ones(len(y))
        for _ in range(2):  # weights from each signal's residual
            p = fit_powers(x * w[:, None], y * w)
            res = y - x @ p
            sc = np.sqrt(np.mean(res[: c.sum()] ** 2))
            si = np.sqrt(np.mean(res[c.sum() :] ** 2))
            w = np.concatenate([np.full(c.sum(), 1 / sc), np.full(i.sum(), 1 / si)])
        p = fit_powers(x * w[:, None], y * w)
        res = y - x @ p
        energy = {
            tl.names[j]: float(p[k] * tl.time_s.get(tl.names[j], 0.0) / max(tl.n_steps, 1))
            for k, j in enumerate(cols)
        }
        out[name] = {
            "counter_residual_w": float(np.sqrt(np.mean(res[: c.sum()] ** 2))),
            "instant_residual_w": float(np.sqrt(np.mean(res[c.sum() :] ** 2))),
            "energy_per_step_j": energy,
            "power_w": {tl.names[j]: float(p[k]) for k, j in enumerate(cols)},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--kernels", help="comma-separated specs (default: all of SPECS)")
    a = ap.parse_args()
    chosen = None
    if a.kernels:
        chosen = {k.replace(":", ""): parse_kernel(k) for k in a.kernels.split(",") if k}
    out = fit_kernels(a.run, chosen)
    for name, r in sorted(out.items(), key=lambda kv: kv[1]["instant_residual_w"]):
        # Every phase of the run (V-JEPA2's five, or the probe's busy and gap), by power.
        print(
            f"{name:7s} instant residual {r['instant_residual_w']:6.1f} W  counter "
            f"{r['counter_residual_w']:5.1f} W  "
            + "  ".join(f"{k.split('/')[-1]} {w:.0f} W" for k, w in r["power_w"].items())
        )
    if a.json:
        a.json.write_text(json.dumps({"run": str(a.run), "kernels": out}, indent=1))


if __name__ == "__main__":
    main()
