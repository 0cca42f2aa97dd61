"""Is a host-paced phase's energy "fixed work + low stall power × extra time"? Offline test.

The regression models each phase as a constant power × its duration. On one replayed batch the
GPU does the same work every step, yet the backward span runs 75–142 ms and the optimizer 5–10
ms: the host sets the pace, and a longer span holds the same kernels plus idle gaps. If those
gaps draw little power, a constant-power fit books energy to the wrong neighbours. This script
fits the energy counter alone (the exact joules between two of its refreshes, each value placed
on the counter's refresh grid as the regression places it) with two models of the same size:

  A  E_interval = Σ_phase P_phase × overlap_s(phase)          + P_gap × gap_s
  B  E_interval = Σ_phase E_phase × Σ_occurrences overlap/span + P_stall × stall_s

In B each occurrence of a phase costs E_phase (its work, at the phase's shortest span in the
run) plus P_stall × (its span − that shortest span), spread evenly over its span; stall_s is
that extra time's share inside the interval, plus the time between leaf spans (between steps,
and the forward parent's own few µs). One stall power is
shared by every phase (a variant, B_split, frees it for backward and optimizer). Both are
non-negative least squares (scipy nnls) over the intervals inside the measured steps.

It prints each model's energy per step per phase against the isolation reference (per step as
attribution_compare.py computes it) and the tool's regression, a moving-block bootstrap
interval, the residual RMS, the span-shift sensitivity, and how energy per block of steps
follows the block's time (a slope far below the mean power says: fixed work + cheap stalls).
Outside the fit, instant power readings that fall inside one backward span are set against
that span's length: under B a longer backward draws less mean power.

    PYTHONPATH=src python3 benchmarks/affine_phase_fit.py RUN_DIR [--json OUT.json]

Reads RUN_DIR's samples.csv, spans.csv and phases_*.csv; writes only --json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from attribution_compare import DEVICE, per_step
from scipy.optimize import nnls

from jouleprof.attribution.grid import device_grids
from jouleprof.attribution.rows import INSTANT, sensor_rows
from jouleprof.sensors.refresh import counter_points

LEAVES = ("data", "forward/target", "forward/context", "backward", "optimizer", "ema")
REPORTED = ("forward", "backward", "optimizer", "ema", "optimizer+ema", "step")
MODELS = ("A", "B", "B_split")


def counter_series(samples: pd.DataFrame, device: str = DEVICE) -> pd.DataFrame:
    """The cumulative counter as (refresh instant, joules), one row per refresh seen."""
    dev = samples[samples["device"].astype(str) == device]
    grids, notes = device_grids(samples, dev, use_power=False)
    if "counter" not in grids:
        raise SystemExit(f"no counter grid: {notes}")
    tau, c = counter_points(
        dev["t_s"].to_numpy(float), dev["energy_j"].to_numpy(float), grids["counter"].grid
    )
    # The first value was read at the run's edge, before any refresh was seen (as rows.py).
    return pd.DataFrame({"t_s": tau[1:], "energy_j": c[1:]})


def occurrences(spans: pd.DataFrame, lag_s: float = 0.0) -> pd.DataFrame:
    """Leaf-phase spans (shifted by lag_s) with their length and extra over the phase's min."""
    occ = spans[spans["phase"].isin(LEAVES)][["step", "phase", "t0_s", "t1_s"]].copy()
    occ[["t0_s", "t1_s"]] += lag_s
    occ["d_s"] = occ["t1_s"] - occ["t0_s"]
    occ["extra_s"] = occ["d_s"] - occ.groupby("phase")["d_s"].transform("min")
    return occ.sort_values("t0_s").reset_index(drop=True)


def intervals(counter: pd.DataFrame, occ: pd.DataFrame) -> pd.DataFrame:
    """Intervals between consecutive counter refreshes lying inside the measured steps."""
    t, e = counter["t_s"].to_numpy(), counter["energy_j"].to_numpy()
    iv = pd.DataFrame({"t0_s": t[:-1], "t1_s": t[1:], "energy_j": np.diff(e)})
    keep = (iv["t0_s"] >= occ["t0_s"].min()) & (iv["t1_s"] <= occ["t1_s"].max())
    return iv[keep & (iv["energy_j"] >= 0)].reset_index(drop=True)


def overlap_s(iv: pd.DataFrame, occ: pd.DataFrame) -> np.ndarray:
    """Seconds of each occurrence (columns) inside each interval (rows)."""
    lo = np.maximum(iv["t0_s"].to_numpy()[:, None], occ["t0_s"].to_numpy()[None])
    hi = np.minimum(iv["t1_s"].to_numpy()[:, None], occ["t1_s"].to_numpy()[None])
    return np.clip(hi - lo, 0.0, None)


def design(iv: pd.DataFrame, occ: pd.DataFrame, model: str) -> pd.DataFrame:
    """The model's columns, one row per interval (A: seconds; B: occurrences and seconds)."""
    ov = overlap_s(iv, occ)
    phase = occ["phase"].to_numpy()
    gap = (iv["t1_s"] - iv["t0_s"]).to_numpy() - ov.sum(axis=1)  # time between spans
    if model == "A":
        cols = {p: ov[:, phase == p].sum(axis=1) for p in LEAVES}
        return pd.DataFrame({**cols, "gap": gap})
    frac = ov / occ["d_s"].to_numpy()[None]  # share of each occurrence inside the interval
    stall = frac * occ["extra_s"].to_numpy()[None]
    cols = {p: frac[:, phase == p].sum(axis=1) for p in LEAVES}
    if model == "B":
        return pd.DataFrame({**cols, "stall": stall.sum(axis=1) + gap})
    split = np.isin(phase, ["backward", "optimizer"])
    return pd.DataFrame(
        {
            **cols,
            "stall_backward": stall[:, phase == "backward"].sum(axis=1),
            "stall_optimizer": stall[:, phase == "optimizer"].sum(axis=1),
            "stall": stall[:, ~split].sum(axis=1) + gap,
        }
    )


def fit(x: pd.DataFrame, y: np.ndarray) -> pd.Series:
    """Non-negative least squares: each parameter in W (per second) or J (per occurrence)."""
    theta, _ = nnls(x.to_numpy(), y)
    return pd.Series(theta, index=x.columns)


def phase_energy(theta: pd.Series, occ: pd.DataFrame, model: str) -> pd.Series:
    """Energy of each occurrence under the fitted model, in J (index as occ)."""
    if model == "A":
        return occ["phase"].map(theta) * occ["d_s"]
    stall_w = occ["phase"].map(lambda p: theta.get(f"stall_{p}", theta["stall"]))
    return occ["phase"].map(theta) + stall_w * occ["extra_s"]


def per_step_j(theta: pd.Series, occ: pd.DataFrame, model: str, total_gap_s: float) -> dict:
    """J per step of each reported phase; "step" adds the time between spans."""
    n = occ["step"].nunique()
    leaf = phase_energy(theta, occ, model).groupby(occ["phase"]).sum() / n
    gap_w = theta["gap"] if model == "A" else theta["stall"]
    out = {
        "forward": leaf["forward/target"] + leaf["forward/context"],
        "backward": leaf["backward"],
        "optimizer": leaf["optimizer"],
        "ema": leaf["ema"],
        "optimizer+ema": leaf["optimizer"] + leaf["ema"],
        "step": leaf.sum() + gap_w * total_gap_s / n,
    }
    return {k: float(v) for k, v in out.items()}


def residual_rms(x: pd.DataFrame, y: np.ndarray, theta: pd.Series, dur: np.ndarray) -> dict:
    r = y - x.to_numpy() @ theta.to_numpy()
    return {
        "rms_j": float(np.sqrt(np.mean(r**2))),
        "rms_w": float(np.sqrt(np.mean((r / dur) ** 2))),
    }


def block_bootstrap(x: pd.DataFrame, y: np.ndarray, occ, model, gap_s, block, n_boot, seed=0):
    """95 % percentile interval of per_step_j from moving blocks of `block` intervals."""
    rng = np.random.default_rng(seed)
    n = len(y)
    starts = rng.integers(0, n - block + 1, size=(n_boot, -(-n // block)))
    draws = []
    for s in starts:
        idx = (s[:, None] + np.arange(block)[None]).ravel()[:n]
        draws.append(per_step_j(fit(x.iloc[idx], y[idx]), occ, model, gap_s))
    d = pd.DataFrame(draws)
    return {k: [float(d[k].quantile(0.025)), float(d[k].quantile(0.975))] for k in d}


def step_blocks(counter: pd.DataFrame, occ: pd.DataFrame, fits: dict, k: int) -> dict:
    """Energy against time over blocks of k consecutive steps (counter interpolated at the
    block edges), with the slope each fitted model predicts for the same blocks."""
    edges = occ.groupby("step").agg(t0=("t0_s", "min"), t1=("t1_s", "max"))
    blk = np.arange(len(edges)) // k
    full = blk < len(edges) // k
    b = edges[full].groupby(blk[full]).agg(t0=("t0", "min"), t1=("t1", "max"))
    t_s = (b["t1"] - b["t0"]).to_numpy()
    t_c, e_c = counter["t_s"].to_numpy(), counter["energy_j"].to_numpy()
    e_j = np.interp(b["t1"].to_numpy(), t_c, e_c) - np.interp(b["t0"].to_numpy(), t_c, e_c)
    step_blk = pd.Series(blk, index=edges.index)
    out = {
        "k_steps": k,
        "n_blocks": len(b),
        "time_s_mean": float(t_s.mean()),
        "time_cv": float(t_s.std() / t_s.mean()),
        "energy_j_mean": float(e_j.mean()),
        "energy_cv": float(e_j.std() / e_j.mean()),
        "corr": float(np.corrcoef(t_s, e_j)[0, 1]),
        "slope_w": float(np.polyfit(t_s, e_j, 1)[0]),
        "intercept_j": float(np.polyfit(t_s, e_j, 1)[1]),
        "mean_power_w": float(e_j.sum() / t_s.sum()),
    }
    for model, theta in fits.items():
        busy = phase_energy(theta, occ, model).groupby(occ["step"].map(step_blk)).sum()
        busy_s = occ["d_s"].groupby(occ["step"].map(step_blk)).sum()
        gap_w = theta["gap"] if model == "A" else theta["stall"]
        pred = busy.loc[b.index].to_numpy() + gap_w * (t_s - busy_s.loc[b.index].to_numpy())
        out[f"model_{model}_slope_w"] = float(np.polyfit(t_s, pred, 1)[0])
    return out


def instant_in_backward(samples, occ, theta_b: pd.Series, window_s=0.04, margin_s=0.01) -> dict:
    """A check outside the fit: instant power readings whose window (the field's ~40 ms before
    its refresh, placed as the regression places it) lies inside one backward span, against
    that span's length; beside it, model B's mean power over a span of that length."""
    dev = samples[samples["device"].astype(str) == DEVICE]
    grid = device_grids(samples, dev, use_counter=False)[0]["power"].grid
    rows = sensor_rows(dev, {INSTANT: grid}, counter_weight=None, instant=(window_s, 1.0))
    bw = occ[occ["phase"] == "backward"]
    i = np.searchsorted(bw["t0_s"].to_numpy(), rows.t0_s - margin_s) - 1
    ok = (i >= 0) & (bw["t1_s"].to_numpy()[i] >= rows.t1_s + margin_s)
    d_s, p_w = bw["d_s"].to_numpy()[i[ok]], rows.power_w[ok]
    q = pd.qcut(d_s, 4, labels=False)
    e_min = theta_b["backward"] - theta_b["stall"] * bw["d_s"].min()
    bins = [
        {
            "span_ms": float(1e3 * d_s[q == k].mean()),
            "n": int((q == k).sum()),
            "instant_w": float(p_w[q == k].mean()),
            "model_B_w": float(theta_b["stall"] + e_min / d_s[q == k].mean()),
        }
        for k in range(4)
    ]
    return {"n": int(ok.sum()), "corr": float(np.corrcoef(d_s, p_w)[0, 1]), "quartiles": bins}


def analyse(run_dir: Path, n_boot: int, block: int, lags_ms: list[float]) -> dict:
    samples = pd.read_csv(run_dir / "samples.csv")
    spans = pd.read_csv(run_dir / "spans.csv")
    counter = counter_series(samples)
    occ = occurrences(spans)
    iv = intervals(counter, occ)
    y, dur = iv["energy_j"].to_numpy(), (iv["t1_s"] - iv["t0_s"]).to_numpy()
    span_all = occ["t1_s"].max() - occ["t0_s"].min()
    gap_s = float(span_all - occ["d_s"].sum())
    iso, reg, prop = (per_step(run_dir, m) for m in ("isolation", "regression", "proportional"))
    isolation = iso["energy_per_step_j"].to_dict()
    isolation["optimizer+ema"] = isolation["optimizer"] + isolation["ema"]
    isolation["step"] = float(prop["energy_per_step_j"].sum())  # measured, as compare does
    out: dict = {
        "run_dir": str(run_dir),
        "n_intervals": len(iv),
        "n_steps": int(occ["step"].nunique()),
        "isolation_j": {k: float(isolation[k]) for k in REPORTED},
        "tool_regression_j": {
            k: float(v) for k, v in reg["energy_per_step_j"].items() if k in REPORTED and v == v
        },
        "span_s": occ.groupby("phase")["d_s"].describe()[["min", "50%", "max"]].to_dict("index"),
        "models": {},
    }
    fits = {}
    for model in MODELS:
        x = design(iv, occ, model)
        theta = fits[model] = fit(x, y)
        est = per_step_j(theta, occ, model, gap_s)
        out["models"][model] = {
            "params": theta.to_dict(),
            "residual": residual_rms(x, y, theta, dur),
            "per_step_j": est,
            "ci95_j": block_bootstrap(x, y, occ, model, gap_s, block, n_boot),
            "vs_isolation_pct": {k: 100 * (est[k] / isolation[k] - 1) for k in REPORTED},
        }
    out["step_time_vs_energy"] = [step_blocks(counter, occ, fits, k) for k in (1, 5, 10)]
    out["instant_in_backward"] = instant_in_backward(samples, occ, fits["B"])
    out["lag_sensitivity"] = []
    for lag in lags_ms:
        o = occurrences(spans, lag / 1e3)
        row: dict = {"lag_ms": lag}
        for model in ("A", "B"):
            x = design(iv, o, model)
            theta = fit(x, y)
            est = per_step_j(theta, o, model, gap_s)
            row[model] = {
                "rms_j": residual_rms(x, y, theta, dur)["rms_j"],
                **{k: est[k] for k in ("forward", "backward", "optimizer+ema")},
            }
        out["lag_sensitivity"].append(row)
    return out


def report(res: dict) -> None:
    iso, tool = res["isolation_j"], res["tool_regression_j"]
    print(f"{res['n_intervals']} counter intervals inside {res['n_steps']} measured steps")
    print(
        f"{'J/step':>14s} {'isolation':>9s} {'tool reg':>9s}"
        + "".join(f" {'model ' + m:>23s} {'Δ%':>6s}" for m in MODELS)
    )
    for k in REPORTED:
        cells = f"{k:>14s} {iso[k]:9.3f} " + (f"{tool[k]:9.3f}" if k in tool else f"{'—':>9s}")
        for m in MODELS:
            r = res["models"][m]
            lo, hi = r["ci95_j"][k]
            cells += (
                f" {r['per_step_j'][k]:7.3f} [{lo:6.2f},{hi:6.2f}] {r['vs_isolation_pct'][k]:+6.1f}"
            )
        print(cells)
    print(
        "(step: isolation column is the measured energy per step; Δ% for it is model vs measured)"
    )
    for m in MODELS:
        r = res["models"][m]
        p = ", ".join(f"{k} {v:.1f}" for k, v in r["params"].items())
        unit = "W" if m == "A" else "J per occurrence; stall W"
        print(
            f"model {m}: residual {r['residual']['rms_j']:.3f} J ({r['residual']['rms_w']:.1f} W)"
            f" per interval; params ({unit}): {p}"
        )
    print("energy vs time over blocks of k steps (counter interpolated at block edges):")
    for b in res["step_time_vs_energy"]:
        print(
            f"  k={b['k_steps']:2d} n={b['n_blocks']:3d}: time CV {100 * b['time_cv']:.1f} %, "
            f"energy CV {100 * b['energy_cv']:.1f} %, r {b['corr']:.2f}, slope {b['slope_w']:.0f} W"
            f" (mean power {b['mean_power_w']:.0f} W; model A predicts {b['model_A_slope_w']:.0f},"
            f" B {b['model_B_slope_w']:.0f})"
        )
    ib = res["instant_in_backward"]
    print(
        f"instant power inside backward spans (not fitted): n={ib['n']}, r(span, power) "
        f"{ib['corr']:.2f}; by span quartile: "
        + ", ".join(
            f"{b['span_ms']:.0f} ms {b['instant_w']:.0f} W (B {b['model_B_w']:.0f})"
            for b in ib["quartiles"]
        )
    )
    print("span shift (ms): residual J and J/step forward / backward / optimizer+ema")
    for row in res["lag_sensitivity"]:
        print(
            f"  {row['lag_ms']:+5.1f}"
            + "".join(
                f"   {m}: {row[m]['rms_j']:.2f} | {row[m]['forward']:.2f} {row[m]['backward']:.2f} "
                f"{row[m]['optimizer+ema']:.2f}"
                for m in ("A", "B")
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--block", type=int, default=15, help="bootstrap block, in intervals")
    ap.add_argument("--lags-ms", default="-4,-2,0,2,4", help="span shifts to refit, in ms")
    a = ap.parse_args()
    res = analyse(a.run_dir, a.n_boot, a.block, [float(x) for x in a.lags_ms.split(",")])
    report(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
