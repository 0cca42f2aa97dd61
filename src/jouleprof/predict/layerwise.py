"""The layer-wise inference predictor: per-layer time from the FakeTensor features, summed with
launch gaps, and energy from time, FLOPs and bytes on top of the board's base power.

Model (fitted on H200 measurements, `fit`):

- layer time: gradient-boosted trees on the layer's roofline bound, FLOPs, bytes, launches,
  kind and precision, trained on each module's own time (CUDA events at module entry and exit);
- pass time: log T = a + b·log(sum of layer times) + c·log(launches · launch_s), so launch
  gaps and the host's pace at small batches are learned from whole-model passes;
- pass energy: E = p·T + k_half·F_tc,half + k_tf32·F_conv,fp32 + k_fp32·F_mm,fp32 + k_vec·F_other
  + k_mem·bytes (non-negative least squares on whole-model windows, T the time model's own
  prediction for each training row; p·T carries the board's idle and base draw). float32
  convolutions run on TF32 tensor cores, float32 matmuls on the float32 units: a FLOP of each costs
  a different energy, so they have separate terms. A layer's energy is its share of E: p times
  its share of T plus the k terms of its own operators, so the layers add up to the pass;
- interval: the quantiles of the log error on held-out architecture families.

`RooflinePredictor` is what ships until measured data exists: roofline time with a launch floor,
power between the GPU file's idle and full-load figures by roofline utilization. It says
`calibrated = False` wherever it is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from jouleprof.predict.features import ModelFeatures
from jouleprof.predict.opcount import CATEGORIES
from jouleprof.predict.roofline import TENSOR_CORE_CATEGORIES, GpuSpec, layer_bounds

CATEGORY_CODE = {c: i for i, c in enumerate(CATEGORIES)}
LAYER_FEATURES = ("log_roof_s", "log_compute_s", "log_memory_s", "log_flops", "log_bytes",
                  "launches", "category", "half", "log_batch", "tc_share")  # fmt: skip


@dataclass(frozen=True)
class LayerPrediction:
    """One module's share of a pass: `time_s` and `energy_j` are per pass (the whole batch) and
    add up, over the layers, to the pass's s_per_batch and j_per_sample x batch."""

    module: str
    module_type: str
    flops: float
    bytes: float
    launches: int
    roofline_s: float
    bound: str
    time_s: float
    energy_j: float


@dataclass(frozen=True)
class Prediction:
    """What one pass of the model costs, predicted."""

    spec: str
    batch: int
    precision: str
    gpu: str
    s_per_batch: float
    j_per_sample: float
    j_per_sample_lo: float
    j_per_sample_hi: float
    predictor: str
    calibrated: bool
    """False: an uncalibrated roofline estimate, not trained on measurements."""
    validated: bool
    """False: the target GPU is not the one the predictor was validated on, or this precision x
    batch was not measured there (the notes say which; the interval is widened where it lies
    outside what was measured)."""
    layers: tuple[LayerPrediction, ...] = field(repr=False)
    unsupported: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self, per_layer: bool = True) -> dict:
        d = {k: getattr(self, k) for k in (
            "spec", "batch", "precision", "gpu", "j_per_sample", "s_per_batch", "j_per_sample_lo",
            "j_per_sample_hi", "predictor", "calibrated", "validated", "unsupported")}  # fmt: skip
        d["notes"] = list(self.notes)
        # energy_j is per pass (the batch); j_per_sample is the figure the total is given in
        d["layers"] = ([{**lp.__dict__, "j_per_sample": lp.energy_j / self.batch}
                        for lp in self.layers] if per_layer else [])  # fmt: skip
        return d


def layer_matrix(feats: ModelFeatures, gpu: GpuSpec) -> tuple[np.ndarray, list]:
    """Feature rows of the layers that launch kernels, and those layers' (features, bound)."""
    bounds = layer_bounds(feats.ops, gpu, feats.layers)
    rows, keep = [], []
    for layer, b in zip(feats.layers, bounds, strict=True):
        if layer.launches == 0:
            continue
        tc = sum(v for k, v in layer.flops_by_category.items() if k in TENSOR_CORE_CATEGORIES)
        rows.append([
            math.log10(b.roofline_s + 1e-9), math.log10(b.compute_s + 1e-9),
            math.log10(b.memory_s + 1e-9), math.log10(layer.flops + 1.0),
            math.log10(layer.bytes_total + 1.0), layer.launches,
            CATEGORY_CODE.get(layer.main_category, CATEGORY_CODE["other"]),
            1.0 if layer.dtype in ("bfloat16", "float16") else 0.0,
            math.log2(feats.batch), tc / layer.flops if layer.flops else 0.0,
        ])  # fmt: skip
        keep.append((layer, b))
    return np.asarray(rows, dtype=float).reshape(-1, len(LAYER_FEATURES)), keep


def energy_terms(feats: ModelFeatures) -> np.ndarray:
    """[F_tc,half, F_tf32, F_tc,fp32, F_other, bytes] of a pass (the energy model's non-time
    terms): tensor-core-kind FLOPs in half precision, float32 convolutions (TF32 tensor cores),
    float32 matmuls and attention (float32 units), every other FLOP, bytes read and written."""
    return _ops_terms(feats.ops)


def module_energy_terms(feats: ModelFeatures) -> dict[str, np.ndarray]:
    """energy_terms of each module's own operators (module path -> terms). Every operator runs in
    exactly one module, so these add up to `energy_terms(feats)`."""
    by: dict[str, list] = {}
    for o in feats.ops:
        by.setdefault(o.module, []).append(o)
    return {m: _ops_terms(ops) for m, ops in by.items()}


def _ops_terms(ops) -> np.ndarray:
    """energy_terms of the operators `ops`, each classified by its own dtype and category (a
    layer's majority dtype would not do: under autocast a layer's weight casts read float32,
    and its half-precision matmul would be priced as a float32 one)."""
    half = tf32 = fp32 = other = 0.0
    nbytes = 0.0
    for o in ops:
        nbytes += o.bytes_read + o.bytes_written
        if o.category in TENSOR_CORE_CATEGORIES:
            if o.dtype in ("bfloat16", "float16"):
                half += o.flops
            elif o.category == "conv":
                tf32 += o.flops
            else:
                fp32 += o.flops
        else:
            other += o.flops
    return np.array([half, tf32, fp32, other, nbytes])


def _fold_terms(k, terms: np.ndarray) -> np.ndarray:
    """`terms` in the layout of the coefficients `k`: a predictor pickled before the TF32 term
    had one fp32 tensor-core term (4 coefficients after p), the TF32 and fp32 FLOPs summed."""
    if len(k) == len(terms):
        return terms
    return np.array([terms[0], terms[1] + terms[2], terms[3], terms[4]])


def _predict_log_s(model, x: np.ndarray) -> np.ndarray:
    """The time model's log10 seconds for rows `x` (one thread: the rows are few)."""
    if not len(x):
        return np.zeros(0)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return np.asarray(model.predict(x), dtype=float)


class RooflinePredictor:
    """Uncalibrated: roofline time with a launch floor, power interpolated by utilization."""

    name = "roofline (uncalibrated)"
    calibrated = False

    def predict(self, feats: ModelFeatures, gpu: GpuSpec) -> Prediction:
        _, keep = layer_matrix(feats, gpu)
        times = [max(b.roofline_s, layer.launches * gpu.launch_s) for layer, b in keep]
        t = max(sum(times), feats.launches * gpu.launch_s)
        roof = sum(b.roofline_s for _, b in keep)
        idle = gpu.idle_w if gpu.idle_w is not None else 0.15 * (gpu.power_limit_w or 700.0)
        full = gpu.full_load_w or gpu.power_limit_w or 700.0
        util = min(1.0, roof / t) if t > 0 else 0.0
        p = idle + (full - idle) * util
        e = p * t
        layers = tuple(
            LayerPrediction(layer.module, layer.module_type, layer.flops, layer.bytes_total,
                            layer.launches, b.roofline_s, b.bound, ti, e * ti / sum(times))
            for (layer, b), ti in zip(keep, times, strict=True)
        )  # fmt: skip
        jps = e / feats.batch
        # without measurements the bound is wide: a roofline is a floor on time, not a forecast
        return Prediction(
            feats.spec, feats.batch, feats.precision, gpu.name, t, jps, jps * 0.5, jps * 3.0,
            self.name, False, gpu.validated, layers, feats.unsupported,
            ("uncalibrated: a roofline estimate from the GPU file's ceilings, not trained on "
             "measurements; the interval [0.5x, 3x] is a guess, not a validated bound",),
        )  # fmt: skip


@dataclass
class LayerwisePredictor:
    """The trained predictor (see the module docstring); `fit` builds one."""

    time_model: object
    """A fitted regressor on LAYER_FEATURES -> log10(layer time, s)."""
    pass_coef: tuple[float, float, float]
    """(a, b, c) of log T = a + b·log(sum layer times) + c·log(launches·launch_s)."""
    energy_coef: tuple[float, ...]
    """(p_w, k_half, k_tf32, k_fp32, k_other, k_byte): J per second, per FLOP (x4), per byte
    (a predictor pickled before the TF32 term has (p_w, k_half, k_fp32, k_other, k_byte))."""
    log_err_q: dict[str, tuple[float, float]]
    """Per batch regime ("b1", "b<=16", "b>16"): 5th and 95th percentile of log(measured/predicted)
    J/sample on held-out families."""
    info: dict = field(default_factory=dict)
    eff_model: object = None
    """An efficiency.EfficiencyTimeModel: where set, it gives the pass and layer times instead
    of the trees and pass_coef."""
    name = "layerwise (trained on H200 measurements)"
    calibrated = True

    def pass_time_s(self, layer_sum_s: float, launches: int, gpu: GpuSpec) -> float:
        a, b, c = self.pass_coef
        lt = math.log(max(launches, 1) * gpu.launch_s)
        return math.exp(a + b * math.log(max(layer_sum_s, 1e-9)) + c * lt)

    def predict(self, feats: ModelFeatures, gpu: GpuSpec) -> Prediction:
        x, keep = layer_matrix(feats, gpu)
        if self.eff_model is not None:
            t = self.eff_model.pass_time(feats, gpu)
            t_layers = self.eff_model.layer_times(feats, gpu, [lay.module for lay, _ in keep])
        else:
            t_layers = 10.0 ** _predict_log_s(self.time_model, x)
            t = self.pass_time_s(float(t_layers.sum()), feats.launches, gpu)
        p, *k = self.energy_coef
        terms = _fold_terms(k, energy_terms(feats))
        e = p * t + float(np.dot(k, terms))
        # each layer's share of E: its share of p·T (by time) plus its own operators' terms, so
        # the layers' energies add up to E (every operator runs in exactly one layer)
        scale = t / t_layers.sum() if t_layers.sum() > 0 else 0.0
        own = module_energy_terms(feats)
        layers = []
        for (layer, b), tl in zip(keep, t_layers, strict=True):
            own_terms = own.get(layer.module, np.zeros(5))
            el = p * tl * scale + float(np.dot(k, _fold_terms(k, own_terms)))
            layers.append(LayerPrediction(layer.module, layer.module_type, layer.flops,
                                          layer.bytes_total, layer.launches, b.roofline_s,
                                          b.bound, float(tl * scale), float(el)))  # fmt: skip
        lo_q, hi_q, notes, measured = self._interval(feats.precision, feats.batch)
        if not gpu.validated:
            # another GPU: the ceilings move the roofline, but nothing was validated there
            lo_q, hi_q = 2 * lo_q - 0.1, 2 * hi_q + 0.1
            notes.append(f"GPU {gpu.name!r} is not the one this predictor was validated on: "
                         "the interval is widened and unvalidated")  # fmt: skip
        jps = e / feats.batch
        return Prediction(
            feats.spec, feats.batch, feats.precision, gpu.name, t, jps, jps * math.exp(lo_q),
            jps * math.exp(hi_q), self.name, True, gpu.validated and measured, tuple(layers),
            feats.unsupported, tuple(notes),
        )  # fmt: skip

    def _interval(self, precision: str, batch: int) -> tuple[float, float, list[str], bool]:
        """(lo, hi) log-error quantiles for the configuration, notes on what was not measured,
        and whether this precision x batch was measured and validated on held-out families."""
        regime = "b1" if batch == 1 else "b<=16" if batch <= 16 else "b>16"
        q = self.log_err_q.get(f"{precision}:{regime}") or self.log_err_q.get(regime)
        lo_q, hi_q = q if q else (-0.3, 0.3)
        notes: list[str] = []
        configs = {(p, int(b)) for p, b in self.info.get("configs", [])}
        if not configs:  # a predictor pickled before configs were recorded
            configs = {(p, int(b)) for p in self.info.get("precisions", [])
                       for b in self.info.get("batches", [])}  # fmt: skip
        if (precision, int(batch)) in configs:
            return lo_q, hi_q, notes, True
        batches = sorted(b for p, b in configs if p == precision)
        listed = ", ".join(f"{p} b{b}" for p, b in sorted(configs))
        if not batches:
            lo_q, hi_q = 2 * lo_q - 0.2, 2 * hi_q + 0.2
            notes.append(f"no {precision} measurements were in the training data (measured: "
                         f"{listed}): unvalidated, the interval widened")  # fmt: skip
        elif batches[0] < batch < batches[-1]:
            notes.append(f"{precision} at batch {batch} was not measured (measured: {listed}): "
                         "interpolated between measured batches, unvalidated")  # fmt: skip
        else:
            lo_q, hi_q = 1.5 * lo_q - 0.1, 1.5 * hi_q + 0.1
            notes.append(f"{precision} at batch {batch} is outside the measured batches "
                         f"(measured: {listed}): extrapolated, unvalidated, the interval "
                         "widened")  # fmt: skip
        return lo_q, hi_q, notes, False
