"""Leave-family-out validation of the layer-wise predictor against three baselines.

For each architecture family, everything is fitted on the other families and the family's
models are predicted. "layerwise" times passes with efficiency.py (roofline with learned
efficiencies and the host's pace); "layerwise_gbt" is the same fit timed by the trees on
per-layer CUDA-event times. Baselines, fitted on the same training rows:
- flops_x_jpf: FLOPs x a fitted J/FLOP (the median over training rows of the same precision and
  batch);
- tdp_x_roofline: the power limit (700 W on the H200) x the summed operator roofline time;
- roofline: the uncalibrated RooflinePredictor (roofline time with a launch floor, power between
  idle and full load by utilization).

Metrics per (precision, batch) slice and overall: median and p90 absolute percentage error of
J/sample, share within +-10 %, Spearman rank correlation.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from jouleprof.predict.dataset import Dataset, configurations
from jouleprof.predict.layerwise import LayerwisePredictor, RooflinePredictor, layer_matrix
from jouleprof.predict.roofline import GpuSpec

METHODS = ("layerwise", "layerwise_gbt", "flops_x_jpf", "tdp_x_roofline", "roofline")


def _roofline_sum(feats, gpu: GpuSpec) -> float:
    _, keep = layer_matrix(feats, gpu)
    return sum(b.roofline_s for _, b in keep)


def leave_family_out(ds: Dataset, gpu: GpuSpec, *, seed: int = 0, progress=None):
    """DataFrame: one row per measured window x method, with measured and predicted J/sample."""
    import pandas as pd

    from jouleprof.predict.fit import fit_layerwise

    rows = configurations(ds.models)
    rows = rows.assign(j_meas=rows["energy_j"] / (rows["passes"] * rows["batch"]))
    out = []
    fams = sorted(set(rows["family"]))
    roof = RooflinePredictor()
    tdp = gpu.power_limit_w or 700.0
    for fam in fams:
        test, train = rows[rows["family"] == fam], rows[rows["family"] != fam]
        if progress:
            progress(fam)
        try:
            pred = fit_layerwise(ds, train, gpu, seed=seed)
            # the same fit, timed by the trees on per-layer CUDA-event times instead
            gbt = replace(pred, eff_model=None)
        except ValueError as e:
            pred = gbt = None
            note = str(e)
        jpf = {}
        for (p, b), g in train.groupby(["precision", "batch"]):
            r = []
            for t in g.itertuples():
                f = ds.features(t.spec, t.precision, int(t.batch))
                if f is not None and f.flops > 0:
                    r.append(t.j_meas * t.batch / f.flops)
            if r:
                jpf[(p, int(b))] = float(np.median(r))
        for t in test.itertuples():
            f = ds.features(t.spec, t.precision, int(t.batch))
            if f is None:
                continue
            base = {"family": fam, "spec": t.spec, "precision": t.precision,
                    "batch": int(t.batch), "j_meas": t.j_meas, "s_meas": t.s_per_pass}  # fmt: skip
            for name, pm in (("layerwise", pred), ("layerwise_gbt", gbt)):
                if pm is not None:
                    pr = pm.predict(f, gpu)
                    out.append({**base, "method": name, "j_pred": pr.j_per_sample,
                                "s_pred": pr.s_per_batch})  # fmt: skip
                else:
                    out.append({**base, "method": name, "j_pred": None, "note": note})
            k = jpf.get((t.precision, int(t.batch)))
            out.append({**base, "method": "flops_x_jpf",
                        "j_pred": k * f.flops / t.batch if k else None})  # fmt: skip
            rs = _roofline_sum(f, gpu)
            out.append({**base, "method": "tdp_x_roofline", "j_pred": tdp * rs / t.batch,
                        "s_pred": rs})  # fmt: skip
            pr = roof.predict(f, gpu)
            out.append({**base, "method": "roofline", "j_pred": pr.j_per_sample,
                        "s_pred": pr.s_per_batch})  # fmt: skip
    return pd.DataFrame(out)


def _metrics(g) -> dict:
    from scipy.stats import spearmanr

    g = g[g["j_pred"].notna()]
    if g.empty:
        return {"n": 0, "mape_median_pct": None, "ape_p90_pct": None, "within_10_pct": None,
                "spearman": None}  # fmt: skip
    ape = (100 * (g["j_pred"] - g["j_meas"]).abs() / g["j_meas"]).to_numpy()
    rho = spearmanr(g["j_pred"], g["j_meas"]).statistic if len(g) > 2 else float("nan")
    return {
        "n": int(len(g)),
        "mape_median_pct": float(np.median(ape)),
        "ape_p90_pct": float(np.percentile(ape, 90)),
        "within_10_pct": float(100 * np.mean(ape <= 10)),
        "spearman": None if math.isnan(rho) else float(rho),
    }


def metrics_table(pred_df):
    """Metrics per method and (precision, batch), plus "all" rows."""
    import pandas as pd

    recs = []
    for (m, p, b), g in pred_df.groupby(["method", "precision", "batch"]):
        recs.append({"method": m, "precision": p, "batch": str(b), **_metrics(g)})
    for m, g in pred_df.groupby("method"):
        recs.append({"method": m, "precision": "all", "batch": "all", **_metrics(g)})
    df = pd.DataFrame(recs)
    order = {m: i for i, m in enumerate(METHODS)}
    return df.sort_values(["precision", "batch", "method"], key=lambda s: s.map(order)
                          if s.name == "method" else s).reset_index(drop=True)  # fmt: skip


def log_error_quantiles(pred_df, min_rows: int = 5) -> dict[str, tuple[float, float]]:
    """5th/95th percentiles of log(measured/predicted) of the layerwise predictor per batch regime
    ("b1", "b<=16", "b>16"), and per precision and regime ("bf16:b1", ...) where a precision has
    at least `min_rows` held-out rows in it."""
    g = pred_df[(pred_df["method"] == "layerwise") & pred_df["j_pred"].notna()]
    r_all = np.log(g["j_meas"] / g["j_pred"].astype(float))
    out = {}
    regimes = (("b1", g["batch"] == 1), ("b<=16", (g["batch"] > 1) & (g["batch"] <= 16)),
               ("b>16", g["batch"] > 16))  # fmt: skip
    for name, sel in regimes:
        if sel.sum() >= min_rows:
            r = r_all[sel]
            out[name] = (float(np.percentile(r, 5)), float(np.percentile(r, 95)))
        for prec in sorted(set(g["precision"])):
            ps = sel & (g["precision"] == prec)
            if ps.sum() >= min_rows:
                r = r_all[ps]
                out[f"{prec}:{name}"] = (float(np.percentile(r, 5)), float(np.percentile(r, 95)))
    return out


def train_shipped(ds: Dataset, gpu: GpuSpec, pred_df, seed: int = 0) -> LayerwisePredictor:
    """The predictor fitted on every family, carrying the held-out error quantiles."""
    from jouleprof.predict.fit import fit_layerwise

    rows = configurations(ds.models)
    pred = fit_layerwise(ds, rows, gpu, seed=seed, log_err_q=log_error_quantiles(pred_df))
    # the efficiency model times the passes; the trees (hundreds of kB) are not needed to predict
    return replace(pred, time_model=None) if pred.eff_model is not None else pred
