"""A scaling law for the joules and seconds of one BERT training step on one GPU (pure functions).

Time, roofline-like: a step is bound by the host launching kernels (a fixed cost per step and per
layer) or by the GPU doing the work, whichever is longer, joined smoothly:

    t_host = a0 + a1·L
    t_dev  = F/R·(1 + H0/H) + M/BW
    t      = (t_host^p + t_dev^p)^(1/p)

F: training FLOPs of the step, M: bytes moved (parameters, gradients, AdamW state, saved
activations: predict.train_features), L layers, H hidden size. R is the matmul throughput of a
wide layer; H0/H is the matmuls' operand traffic: a (T×K)·(K×N) matmul does 2TKN FLOPs and
moves 2(TK + KN + TN) bytes, so its bytes per FLOP fall as 1/H when K, N ∝ H. R and BW are not
fitted: they are the GPU's measured bf16 matmul ceiling and memory bandwidth
(predict/gpus/<gpu>.json); a fit that frees R puts it at that ceiling on the committed sweep
anyway, and a held-out fit without wide compute-bound rows cannot determine it.

Energy: the board's static power over the step, plus a dynamic energy per FLOP that falls with the
matmul width for the same reason, plus a dynamic energy per byte moved:

    E = P0·t + (e_F + e_W/H)·F + e_B·M

Fitted: a0, a1, H0, p on log time; P0, e_F, e_W, e_B ≥ 0 by relative least squares on the
measured times. Several GPUs: predict.train_multi.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

MIN_ROWS = 9
"""The law has 8 fitted constants: it needs more rows than that."""


@dataclass(frozen=True)
class TrainLaw:
    """Fitted constants of the one-GPU law (SI units), and what the fit measured of itself."""

    a0_s: float
    """Host time per step independent of the depth (optimizer launches, loss, data)."""
    a1_s: float
    """Host time per encoder layer (its kernel launches, forward and backward)."""
    rate_flop_s: float
    """Matmul throughput R of a wide layer (H ≫ H0): the GPU's measured ceiling (fixed)."""
    h0: float
    """Width at which the matmuls' operand traffic costs as much time as their FLOPs."""
    p: float
    """Sharpness of the host/device transition (large: a hard max)."""
    mem_bytes_s: float
    """The GPU's measured memory bandwidth BW (fixed, not fitted)."""
    p0_w: float
    """Static power of the board over the step (W)."""
    ef_j_per_flop: float
    """Dynamic energy per FLOP of a wide layer (J)."""
    ew_j_per_flop: float
    """Width term: a FLOP at hidden size H costs e_F + e_W/H (J·hidden units)."""
    eb_j_per_byte: float
    """Dynamic energy per byte moved (J)."""
    rel_err_q90: float = 0.1
    """90th percentile of |relative error| of the energy, leave-one-out on the fitting rows: the
    half-width of the prediction interval."""
    t_rel_err_q90: float = 0.1
    """The same for the time per step."""
    strategy_overhead: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per strategy measured on one GPU (world size 1): time and energy ratios to strategy none
    at the same configuration (predict.train_multi)."""
    multi_gpu: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per strategy, the several-GPU factor fitted on measured rows (predict.train_multi_fit:
    time_ratio, s_per_byte, the rows and GPU counts fitted, and the held-out errors); empty
    until several GPUs were measured (predictions then say they are not validated)."""
    fitted_on: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrainLaw:
        return cls(**d)

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return p

    @classmethod
    def load(cls, path: str | Path) -> TrainLaw:
        return cls.from_json(json.loads(Path(path).read_text()))


def _parts(th, L, H, F, M, bw):
    a0, a1, lr, h0, p = th
    t_host = a0 + a1 * L
    t_dev = F / math.exp(lr) * (1.0 + h0 / H) + M / bw
    return t_host, t_dev, (t_host**p + t_dev**p) ** (1.0 / p)


def predict_time_s(law: TrainLaw, L, H, F, M) -> np.ndarray:
    th = (law.a0_s, law.a1_s, math.log(law.rate_flop_s), law.h0, law.p)
    a = [np.asarray(x, float) for x in (L, H, F, M)]
    return _parts(th, *a, law.mem_bytes_s)[2]


def _energy_design(t, H, F, M) -> np.ndarray:
    return np.column_stack([t, F, F / H, M])


def predict_energy_j(law: TrainLaw, t_s, H, F, M) -> np.ndarray:
    X = _energy_design(*(np.asarray(x, float) for x in (t_s, H, F, M)))
    return X @ np.array([law.p0_w, law.ef_j_per_flop, law.ew_j_per_flop, law.eb_j_per_byte])


def _fit_time(L, H, F, M, t, bw, rate) -> np.ndarray:
    """(a0, a1, log R, H0, p) with R fixed at `rate`, the others by least squares on log time."""
    from scipy.optimize import least_squares

    lr = math.log(rate)

    def res(x):
        return np.log(_parts((x[0], x[1], lr, x[2], x[3]), L, H, F, M, bw)[2]) - np.log(t)

    x = least_squares(
        res, [0.005, 0.003, 500.0, 3.0], bounds=([0, 0, 0, 1], [1, 1, 1e5, 20]), x_scale="jac"
    ).x
    return np.array([x[0], x[1], lr, x[2], x[3]])


def _fit_energy(t, H, F, M, E) -> np.ndarray:
    """Non-negative least squares on relative error (rows divided by E), columns scaled."""
    from scipy.optimize import nnls

    X = _energy_design(t, H, F, M)
    scale = X.max(axis=0)
    coef, _ = nnls(X / scale / E[:, None], np.ones_like(E))
    return coef / scale


def _arrays(rows):
    def col(k):
        return np.array([float(r[k]) for r in rows])

    keys = ("layers", "hidden", "train_flops", "bytes_moved", "s_per_step", "j_per_step")
    return tuple(col(k) for k in keys)


def _law(th, ce, bw, **kw) -> TrainLaw:
    return TrainLaw(
        a0_s=float(th[0]),
        a1_s=float(th[1]),
        rate_flop_s=float(math.exp(th[2])),
        h0=float(th[3]),
        p=float(th[4]),
        mem_bytes_s=float(bw),
        p0_w=float(ce[0]),
        ef_j_per_flop=float(ce[1]),
        ew_j_per_flop=float(ce[2]),
        eb_j_per_byte=float(ce[3]),
        **kw,
    )


def fit(
    rows: Sequence[Mapping[str, float]],
    *,
    mem_bytes_s: float,
    rate_flop_s: float,
    loo: bool = True,
) -> TrainLaw:
    """Fit the law to measured one-GPU rows (keys layers, hidden, train_flops, bytes_moved,
    s_per_step, j_per_step; optional id). `mem_bytes_s` and `rate_flop_s` are the GPU's measured
    memory bandwidth and bf16 matmul ceiling (BW and R, fixed). With `loo`, the interval
    half-widths are the 90th percentiles of the leave-one-out errors (each row predicted by a fit
    without it)."""
    if len(rows) < MIN_ROWS:
        raise ValueError(
            f"the law has 8 fitted constants: fit it on ≥ {MIN_ROWS} configurations, "
            f"got {len(rows)}"
        )
    L, H, F, M, t, E = _arrays(rows)
    law = _law(
        _fit_time(L, H, F, M, t, mem_bytes_s, rate_flop_s),
        _fit_energy(t, H, F, M, E),
        mem_bytes_s,
        fitted_on=[str(r.get("id", i)) for i, r in enumerate(rows)],
    )
    if not (loo and len(rows) > MIN_ROWS):
        return law
    e_err, t_err = [], []
    for i in range(len(rows)):
        others = [r for j, r in enumerate(rows) if j != i]
        sub = fit(others, mem_bytes_s=law.mem_bytes_s, rate_flop_s=law.rate_flop_s, loo=False)
        ti, ei = predict_rows(sub, [rows[i]])
        e_err.append(abs(ei[0] / E[i] - 1.0))
        t_err.append(abs(ti[0] / t[i] - 1.0))
    return replace(
        law,
        rel_err_q90=float(np.quantile(e_err, 0.9)),
        t_rel_err_q90=float(np.quantile(t_err, 0.9)),
    )


def predict_rows(
    law: TrainLaw, rows: Sequence[Mapping[str, float]]
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, joules) per step for rows holding layers, hidden, train_flops, bytes_moved."""
    L, H, F, M = (
        np.array([float(r[k]) for r in rows])
        for k in ("layers", "hidden", "train_flops", "bytes_moved")
    )
    t = predict_time_s(law, L, H, F, M)
    return t, predict_energy_j(law, t, H, F, M)
