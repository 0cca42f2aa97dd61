"""Fit the layer-wise predictor on measured rows (pure: data in, predictor out).

    pred = fit_layerwise(ds, rows, gpu)        # rows: a subset of ds.models (training families)

The three parts are fitted in order: layer times (gradient-boosted trees on the per-layer CUDA
event times), the pass-time map (least squares in log space on whole-model windows), the energy
terms (non-negative least squares on relative error). The energy fit's time column is the time
model's own prediction for each training row, not the measured time: a prediction multiplies
the base power by a predicted time, so the coefficients are fitted the way they are used.
"""

from __future__ import annotations

import math

import numpy as np

from jouleprof.predict.dataset import Dataset
from jouleprof.predict.layerwise import (
    LayerwisePredictor,
    _predict_log_s,
    energy_terms,
    layer_matrix,
)
from jouleprof.predict.roofline import GpuSpec

TIME_KINDS = ("efficiency", "gbt")


def _layer_training(ds: Dataset, rows, gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
    lay = ds.layers
    keyed = {k: g for k, g in lay.groupby(["spec", "precision", "batch"])}
    xs, ys = [], []
    for r in rows.drop_duplicates(["spec", "precision", "batch"]).itertuples():
        feats = ds.features(r.spec, r.precision, int(r.batch))
        g = keyed.get((r.spec, r.precision, int(r.batch)))
        if feats is None or g is None:
            continue
        measured = dict(zip(g["module"], g["self_s"], strict=False))
        x, keep = layer_matrix(feats, gpu)
        for xi, (layer, _) in zip(x, keep, strict=True):
            t = measured.get(layer.module)
            if t is not None and t > 0:
                xs.append(xi)
                ys.append(math.log10(t))
    if not xs:
        raise ValueError("no per-layer times match the traced layers: cannot fit the layer model")
    return np.asarray(xs), np.asarray(ys)


def fit_time_model(x: np.ndarray, y: np.ndarray, seed: int = 0):
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    from jouleprof.predict.layerwise import LAYER_FEATURES

    cat = [LAYER_FEATURES.index("category")]
    model = HistGradientBoostingRegressor(
        max_iter=200, learning_rate=0.1, max_leaf_nodes=31, min_samples_leaf=20,
        categorical_features=cat, random_state=seed,
    )  # fmt: skip
    # small problem: one thread is faster than OpenMP's spinning on a shared machine
    with threadpool_limits(1):
        return model.fit(x, y)


def _model_terms(ds: Dataset, rows, gpu: GpuSpec, time_model):
    """Per training row: (sum of predicted layer times, launches, energy terms, features)."""
    out = []
    for r in rows.itertuples():
        feats = ds.features(r.spec, r.precision, int(r.batch))
        if feats is None:
            out.append(None)
            continue
        x, _ = layer_matrix(feats, gpu)
        s = float((10.0 ** _predict_log_s(time_model, x)).sum())
        out.append((s, feats.launches, energy_terms(feats)))
    return out


def fit_layerwise(ds: Dataset, rows, gpu: GpuSpec, *, seed: int = 0,
                  log_err_q: dict | None = None, time_kind: str = "efficiency",
                  ) -> LayerwisePredictor:  # fmt: skip
    """Fit on `rows` (DataFrame rows of ds.models with spec, precision, batch, passes, s_per_pass,
    energy_j)."""
    from scipy.optimize import nnls

    if time_kind not in TIME_KINDS:
        raise ValueError(f"time_kind must be one of {TIME_KINDS}, got {time_kind!r}")
    x, y = _layer_training(ds, rows, gpu)
    tm = fit_time_model(x, y, seed)
    terms = _model_terms(ds, rows, gpu, tm)
    eff = None
    grouped: dict[int, tuple] = {}  # row position -> (roof groups, launches, module calls)
    if time_kind == "efficiency":
        from jouleprof.predict.efficiency import fit_efficiency, roof_groups

        erows = []
        for i, r in enumerate(rows.itertuples()):
            f = ds.features(r.spec, r.precision, int(r.batch))
            if f is not None:
                g, n = roof_groups(f.ops, gpu)
                grouped[i] = (g, n, f.module_calls, f.kernel_module_calls)
                erows.append((*grouped[i], float(r.s_per_pass)))
        eff = fit_efficiency(erows)
    ok = [i for i, t in enumerate(terms) if t is not None and t[0] > 0]
    if len(ok) < 4:
        raise ValueError(f"only {len(ok)} whole-model rows have features: need >= 4 to fit")
    sub = rows.iloc[ok]
    t_meas = sub["s_per_pass"].to_numpy(float)
    e_pass = (sub["energy_j"] / sub["passes"]).to_numpy(float)
    a = np.array([[1.0, math.log(terms[i][0]), math.log(max(terms[i][1], 1) * gpu.launch_s)]
                  for i in ok])  # fmt: skip
    coef, *_ = np.linalg.lstsq(a, np.log(t_meas), rcond=None)
    # the time each training row is predicted to take, by the time model that ships
    if eff is not None:
        t_fit = [eff.grouped_pass_time(*grouped[i]) for i in ok]
    else:
        t_fit = np.exp(a @ coef)
    # energy: relative residuals (each row divided by its measured energy), columns scaled
    m = np.array([[t_fit[j], *terms[i][2]] for j, i in enumerate(ok)])
    scale = np.maximum(np.abs(m).max(axis=0), 1e-30)
    w = (m / scale) / e_pass[:, None]
    k, _ = nnls(w, np.ones(len(ok)))
    k = k / scale
    info = {"n_layer_rows": int(len(y)), "n_model_rows": len(ok),
            "families": sorted(set(sub["family"])),
            "precisions": sorted(set(sub["precision"])),
            "batches": sorted(int(b) for b in set(sub["batch"])),
            "energy_time": "predicted",
            "configs": sorted({(str(p), int(b)) for p, b in zip(sub["precision"], sub["batch"],
                                                                strict=True)})}  # fmt: skip
    return LayerwisePredictor(
        time_model=tm,
        pass_coef=tuple(float(c) for c in coef),
        energy_coef=tuple(float(v) for v in k),
        log_err_q=log_err_q or {},
        info={**info, "time_kind": time_kind},
        eff_model=eff,
    )
