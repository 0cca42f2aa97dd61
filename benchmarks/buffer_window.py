"""What window does each sample of NVML's power buffer average, and when? An offline fit.

`jouleprof measure/profile --power-buffer` (and kernel_probe.py) copy the driver's power
samples, one every ~20 ms, to power_buffer.csv. Before the regression can use them as rows it
needs their model: a sample stamped t is taken to weigh the power before t − lag over a kernel
of length w (a boxcar: the mean over [t − lag − w, t − lag]; or a triangle or an exponential,
as `jouleprof.attribution.kernels` writes them). This scans shape, w and lag: for each, every
sample is an equation Σ_phase P_phase × (its weighted share of that window) = the sample's
watts, the phase powers are fitted by non-negative least squares, and the residual RMS says
how well (shape, w, lag) explains the samples. Sharp, recorded phase edges (kernel_probe.py's
bursts) make the minimum clear. Samples whose window touches warm-up or unrecorded time
(`<warmup>`, `<outside>`) are left out.

w and lag trade off along a ridge (a longer window at a shorter lag puts its centre at the
same place), so the JSON also keeps, for each lag, the best window (`ridge`).

With `--response PHASE` (a load of one phase on a steady background, as the kernel probe's
bursts), it also estimates the buffer's response to that phase without assuming a shape: the
samples are fitted as a baseline plus, for each bin of `--bin-ms` before the stamp, a
non-negative weight times the share of that bin the phase covers. The weights, normalised,
are what a step of that phase looks like in the buffer (the sensor's kernel and the board's
own ramp together, which is what attribution needs).

The fits above give each phase one constant power, but the board's draw itself ramps up at a
burst's start and decays for tens of ms after its end (the energy counter, which needs no
kernel, shows it), and a kernel fitted so absorbs that. `--joint PHASE` refits the kernel the
way the regression uses it: PHASE's spans and the gaps after them are cut into pieces
(`--busy-cuts-ms`, `--gap-cuts-ms`), each piece gets its own power, and for each shape and
window the counter's rows and the buffer's rows are fitted together
(`jouleprof.attribution` regression, the buffer's lag refined around `--joint-lag-ms`, the
instant field left out); the buffer rows' residual ranks the kernels.

    PYTHONPATH=src python3 benchmarks/buffer_window.py RUN_DIR [--device gpu0]
        [--shapes box,tri,exp] [--windows-ms 5:60:5] [--lags-ms -40:40:5]
        [--response busy --bin-ms 2] [--joint busy --joint-windows-ms 20,30,40]
        [--json OUT.json]

Prints the best (shape, w, lag) overall and per shape, its residual and phase powers, the
ridge of the best shape, and the response's cumulative weight.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from jouleprof.attribution.common import EXCLUDED, build_timeline
from jouleprof.attribution.kernels import BOXCAR, exponential, triangle
from jouleprof.attribution.placement import fit_powers, kernel_fractions
from jouleprof.sensors.nvml_buffer import POWER_BUFFER_CSV

SHAPES = {"box": BOXCAR, "tri": triangle(), "exp": exponential()}
"""Kernel shapes, as boxes in units of the window, exactly as the regression takes them
(`jouleprof.attribution.kernels`; the exponential's window is 5 τ)."""


def grid_ms(spec: str) -> np.ndarray:
    """ "a:b:step" (inclusive of b) in ms → seconds."""
    a, b, step = (float(x) for x in spec.split(":"))
    return np.arange(a, b + step / 2, step) / 1e3


def _device_samples(buffer: pd.DataFrame, device: str) -> tuple[np.ndarray, np.ndarray]:
    pb = buffer[buffer["device"].astype(str) == device]
    if pb.empty:
        raise SystemExit(f"no buffer sample of device {device!r}")
    return pb["t_s"].to_numpy(float), pb["power_w"].to_numpy(float)


def fit_windows(
    buffer: pd.DataFrame,
    spans: pd.DataFrame,
    windows_s,
    lags_s,
    device: str = "gpu0",
    shapes: tuple[str, ...] = ("box",),
    warmup_steps: int = 0,
) -> dict:
    """Residual RMS (W) and phase powers for every (shape, window, lag); the best, overall and
    per shape; per shape the ridge (the best window at each lag)."""
    t, y = _device_samples(buffer, device)
    tl = build_timeline(spans, float(t.min()) - 1.0, float(t.max()) + 1.0, warmup_steps)
    r0, r1 = tl.region_s
    excl = [tl.names.index(nm) for nm in EXCLUDED]
    cols = [j for j, nm in enumerate(tl.names) if nm not in EXCLUDED]
    grid = []
    for shape in shapes:
        kernel = SHAPES[shape]
        for lag in lags_s:
            for w in windows_s:
                t1 = t - lag
                t0 = t1 - w
                keep = (t0 >= r0) & (t1 <= r1)
                keep[keep] = tl.overlap_s(t0[keep], t1[keep])[:, excl].max(axis=1) <= 1e-9
                if keep.sum() < 2 * len(cols):
                    continue
                x = kernel_fractions(tl, t1[keep], np.full(int(keep.sum()), w), kernel, 0.0)
                x = x[:, cols]
                p = fit_powers(x, y[keep])
                res = float(np.sqrt(np.mean((y[keep] - x @ p) ** 2)))
                grid.append(
                    {
                        "shape": shape,
                        "window_ms": 1e3 * w,
                        "lag_ms": 1e3 * lag,
                        "n": int(keep.sum()),
                        "residual_w": res,
                        "power_w": {tl.names[j]: float(p[k]) for k, j in enumerate(cols)},
                    }
                )
    if not grid:
        raise SystemExit("no buffer sample's window falls inside the recorded steps")
    by_shape = {}
    for shape in shapes:
        mine = [g for g in grid if g["shape"] == shape]
        if not mine:
            continue
        ridge = []
        for lag in sorted({g["lag_ms"] for g in mine}):
            at = min((g for g in mine if g["lag_ms"] == lag), key=lambda g: g["residual_w"])
            ridge.append({k: at[k] for k in ("lag_ms", "window_ms", "residual_w")})
        best = min(mine, key=lambda g: g["residual_w"])
        by_shape[shape] = {"best": best, "ridge": ridge, "centroid_ms": _centroid_ms(best)}
    best = min(grid, key=lambda g: g["residual_w"])
    return {"device": device, "n_samples": len(t), "best": best, "shapes": by_shape, "grid": grid}


def _centroid_ms(g: dict) -> float:
    """Mean age of the power a kernel weighs, before the stamp (ms)."""
    boxes = SHAPES[g["shape"]]
    c = sum(wt * 0.5 * (a + b) for a, b, wt in boxes)
    return g["lag_ms"] + c * g["window_ms"]


def response(
    buffer: pd.DataFrame,
    spans: pd.DataFrame,
    phase: str,
    device: str = "gpu0",
    bin_s: float = 0.002,
    lo_s: float = -0.02,
    hi_s: float = 0.12,
    settle_s: float = 0.2,
) -> dict:
    """The buffer's response to one phase, shape-free (module docstring).

    Fits each sample stamped t as baseline + Σ_k h_k × (share of [t − (k+1)·bin, t − k·bin]
    the phase covers), h_k ≥ 0, for bins from `lo_s` to `hi_s` before the stamp; samples
    within `settle_s` of the first span are left out (their past is not recorded).
    """
    t, y = _device_samples(buffer, device)
    sp = spans[spans["phase"].astype(str) == phase].sort_values("t0_s")
    if sp.empty:
        raise SystemExit(f"no span of phase {phase!r}")
    a, b = sp["t0_s"].to_numpy(float), sp["t1_s"].to_numpy(float)
    done = np.concatenate([[0.0], np.cumsum(b - a)])

    def covered(x: np.ndarray) -> np.ndarray:
        """Time the phase covered from its first span to x."""
        i = np.searchsorted(a, x, side="right") - 1
        ok = i >= 0
        ii = np.maximum(i, 0)
        return np.where(ok, done[ii] + np.clip(x - a[ii], 0.0, (b - a)[ii]), 0.0)

    keep = (t > a[0] + settle_s) & (t < b[-1])
    t, y = t[keep], y[keep]
    starts = np.arange(lo_s, hi_s - bin_s / 2, bin_s)
    x = np.column_stack([(covered(t - s) - covered(t - s - bin_s)) / bin_s for s in starts])
    design = np.column_stack([x, np.ones(len(t))])
    lower = np.concatenate([np.zeros(len(starts)), [-np.inf]])
    fit = lsq_linear(design, y, bounds=(lower, np.inf))
    h, base = fit.x[:-1], float(fit.x[-1])
    total = float(h.sum())
    cum = np.cumsum(h) / total if total > 0 else np.zeros_like(h)
    mids = starts + bin_s / 2

    def reach(q: float) -> float:
        return float(1e3 * (starts[np.searchsorted(cum, q)] + bin_s))

    return {
        "phase": phase,
        "n": int(len(t)),
        "bin_ms": 1e3 * bin_s,
        "baseline_w": base,
        "step_w": total,
        "residual_w": float(np.sqrt(np.mean((y - design @ fit.x) ** 2))),
        "centroid_ms": float(1e3 * (h @ mids) / total) if total > 0 else None,
        "reach_ms": {f"{int(100 * q)}%": reach(q) for q in (0.1, 0.5, 0.9, 0.99)},
        "bins": [
            {"from_ms": float(1e3 * s), "to_ms": float(1e3 * (s + bin_s)), "weight_w": float(v)}
            for s, v in zip(starts, h, strict=True)
        ],
    }


def piece_spans(spans: pd.DataFrame, phase: str, busy_cuts_s, gap_cuts_s) -> pd.DataFrame:
    """`phase`'s spans cut at `busy_cuts_s` after their start (pieces phase0, phase1, ...),
    and the gap after each, up to the next span, cut at `gap_cuts_s` after its end (gap0,
    gap1, ...; a 1 ms margin is left before the next span). Other phases are dropped."""
    sp = spans[spans["phase"].astype(str) == phase].sort_values("t0_s").to_dict("records")
    rows = []
    for i, r in enumerate(sp):
        nxt = sp[i + 1]["t0_s"] - 1e-3 if i + 1 < len(sp) else r["t1_s"] + 0.1
        for name, a, b, cuts in (
            (phase, r["t0_s"], r["t1_s"], busy_cuts_s),
            ("gap", r["t1_s"], nxt, gap_cuts_s),
        ):
            edges = [a] + [a + c for c in cuts if a + c < b] + [b]
            for k, (u, v) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
                if v > u:
                    rows.append({"step": r["step"], "phase": f"{name}{k}", "t0_s": u, "t1_s": v})
    return pd.DataFrame(rows)


def joint_fit(
    run: Path,
    phase: str,
    shapes,
    windows_s,
    lag_s: float,
    busy_cuts_s=(0.003, 0.008),
    gap_cuts_s=(0.010, 0.025, 0.045),
    device: str = "gpu0",
) -> dict:
    """The kernel fitted beside the counter, with the board's ramp and tail as pieces (module
    docstring): per (shape, window), the buffer's fitted lag, its scale against the counter,
    each signal's residual and each piece's power; the best by the buffer rows' residual."""
    import shutil
    import tempfile

    from jouleprof.attribution.api import attribute

    spans = pd.read_csv(run / "spans.csv")
    out = {"phase": phase, "busy_cuts_ms": [1e3 * c for c in busy_cuts_s]}
    out["gap_cuts_ms"] = [1e3 * c for c in gap_cuts_s]
    fits = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name in ("samples.csv", POWER_BUFFER_CSV):
            shutil.copy(run / name, d / name)
        piece_spans(spans, phase, busy_cuts_s, gap_cuts_s).to_csv(d / "spans.csv", index=False)
        common = {"warmup_steps": 0, "device": device, "use_instant": False, "n_boot": 200}
        counter = attribute(d, "regression", use_buffer=False, stall_model=False, **common)
        dg = counter.devices[0].diagnostics
        out["counter_only"] = {
            "residual_w": dg["rows"]["counter"]["residual_rms_w"],
            "power_w": dg["fitted_power_w"],
        }
        for shape in shapes:
            for w in windows_s:
                res = attribute(
                    d,
                    "regression",
                    use_buffer=True,
                    stall_model=False,
                    buffer_kernel=SHAPES[shape],
                    buffer_window_s=float(w),
                    buffer_lag_s=lag_s,
                    buffer_lag_sd_s=0.006,
                    **common,
                ).devices[0]
                dg = res.diagnostics
                fits.append(
                    {
                        "shape": shape,
                        "window_ms": 1e3 * float(w),
                        "lag_ms": 1e3 * dg["buffer"]["lag_fitted_s"],
                        "scale_vs_counter": (dg["buffer"]["scale_vs_counter"] or {}).get("scale"),
                        "residual_w": {k: v["residual_rms_w"] for k, v in dg["rows"].items()},
                        "power_w": dg["fitted_power_w"],
                    }
                )
    out["fits"] = fits
    out["best"] = min(fits, key=lambda f: f["residual_w"]["power_buffer"]) if fits else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="gpu0")
    ap.add_argument("--shapes", default="box", help="comma-separated: box, tri, exp")
    ap.add_argument("--windows-ms", default="5:60:5")
    ap.add_argument("--lags-ms", default="-40:40:5")
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--response", metavar="PHASE", help="also the shape-free response to PHASE")
    ap.add_argument("--bin-ms", type=float, default=2.0)
    ap.add_argument("--joint", metavar="PHASE", help="also the kernel fitted beside the counter")
    ap.add_argument("--joint-windows-ms", default="20,30,40,50,60")
    ap.add_argument("--joint-lag-ms", type=float, default=3.0)
    ap.add_argument("--busy-cuts-ms", default="3,8")
    ap.add_argument("--gap-cuts-ms", default="10,25,45")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep-grid", action="store_true", help="write every grid point's fit")
    a = ap.parse_args()
    shapes = tuple(s for s in a.shapes.split(",") if s)
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; choose from {sorted(SHAPES)}")
    buffer = pd.read_csv(a.run / POWER_BUFFER_CSV)
    spans = pd.read_csv(a.run / "spans.csv")
    out = fit_windows(
        buffer,
        spans,
        grid_ms(a.windows_ms),
        grid_ms(a.lags_ms),
        a.device,
        shapes,
        a.warmup_steps,
    )
    out["command"] = (
        f"buffer_window.py {a.run} --shapes {a.shapes} --windows-ms {a.windows_ms} "
        f"--lags-ms={a.lags_ms} --warmup-steps {a.warmup_steps}"
        + (f" --response {a.response} --bin-ms {a.bin_ms:g}" if a.response else "")
    )

    def line(g: dict) -> str:
        return (
            f"{g['shape']} {g['window_ms']:.0f} ms at lag {g['lag_ms']:+.0f} ms: residual "
            f"{g['residual_w']:.1f} W; "
            + ", ".join(f"{k} {v:.0f} W" for k, v in g["power_w"].items())
        )

    print(f"{out['n_samples']} samples; best {line(out['best'])}")
    for shape, s in out["shapes"].items():
        print(f"  best {shape}: {line(s['best'])} (centroid {s['centroid_ms']:.1f} ms)")
    best_shape = out["shapes"][out["best"]["shape"]]
    print(f"  ridge of {out['best']['shape']} (best window per lag):")
    for r in best_shape["ridge"]:
        print(
            f"    lag {r['lag_ms']:+5.0f} ms: window {r['window_ms']:5.0f} ms, "
            f"residual {r['residual_w']:7.1f} W"
        )
    if a.response:
        r = response(buffer, spans, a.response, a.device, a.bin_ms / 1e3)
        out["response"] = r
        print(
            f"  response to {a.response}: baseline {r['baseline_w']:.0f} W + step "
            f"{r['step_w']:.0f} W, residual {r['residual_w']:.1f} W, centroid "
            f"{r['centroid_ms']:.1f} ms; reached 10/50/90/99 % at "
            + "/".join(f"{v:.0f}" for v in r["reach_ms"].values())
            + " ms"
        )
    if a.joint:
        ms = [float(x) / 1e3 for x in a.joint_windows_ms.split(",") if x]
        out["command"] += (
            f" --joint {a.joint} --joint-windows-ms {a.joint_windows_ms} --joint-lag-ms "
            f"{a.joint_lag_ms:g} --busy-cuts-ms {a.busy_cuts_ms} --gap-cuts-ms {a.gap_cuts_ms}"
        )
        j = joint_fit(
            a.run,
            a.joint,
            shapes,
            ms,
            a.joint_lag_ms / 1e3,
            [float(x) / 1e3 for x in a.busy_cuts_ms.split(",") if x],
            [float(x) / 1e3 for x in a.gap_cuts_ms.split(",") if x],
            a.device,
        )
        out["joint"] = j
        c = j["counter_only"]
        print(
            f"  counter alone, {a.joint} and its gaps in pieces: residual {c['residual_w']:.1f} W; "
            + ", ".join(f"{k} {v:.0f} W" for k, v in c["power_w"].items())
        )
        for f in j["fits"]:
            print(
                f"  joint {f['shape']} {f['window_ms']:.0f} ms: lag {f['lag_ms']:.1f} ms, scale "
                f"{f['scale_vs_counter']:.4f}, buffer residual "
                f"{f['residual_w']['power_buffer']:.1f} W, "
                f"counter {f['residual_w']['counter']:.1f} W"
            )
    if a.json:
        if not a.keep_grid:
            out.pop("grid")
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
