"""A scaling law for the joules and seconds of one BERT training step (pure functions).

Time, roofline-like: a step is bound by the host launching kernels (a fixed cost per layer) or
by the GPU doing the work, whichever is longer, joined smoothly:

    t_host = a0 + a1·L
    t_dev  = F / (F_max · H / (H + H0))          (matmul efficiency grows with the hidden size)
    t      = (t_host^p + t_dev^p)^(1/p)

Energy: the board's static power over the step plus a dynamic energy per FLOP and per byte:

    E = P0·t + e_F·F + e_B·M

F: training FLOPs of the step, M: bytes moved (predict.train_features), L layers, H hidden.
On N GPUs (DDP/FSDP: per-GPU batch B; TP: the model split N ways) each GPU's step is the
one-GPU law on its share, slowed by the efficiency factor η = measured speedup over ideal, and
communication adds its bytes:

    t_N = t_1(share) / η,   E_N = N·(P0·t_N + e_F·F_share + e_B·M_share) + e_C·C

η and e_C need multi-GPU data; until fitted, predictions take η = 1 and e_C = e_B, and widen
their interval to cover η ∈ [ETA_LO, 1].
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ETA_LO = 0.6
"""The low end of the unfitted efficiency factor (a guess, widening the interval, not a fit)."""


@dataclass(frozen=True)
class TrainLaw:
    """Fitted constants of the law (SI units)."""

    a0_s: float
    a1_s: float
    fmax_flop_s: float
    h0: float
    p: float
    p0_w: float
    ef_j_per_flop: float
    eb_j_per_byte: float
    rel_err_q90: float = 0.1
    """90th percentile of |relative error| of the energy in leave-one-out on the fitting set:
    the half-width of the prediction interval."""
    eta: float | None = None
    """Multi-GPU efficiency factor; None: unfitted."""
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


def _time(theta: np.ndarray, L, H, F) -> np.ndarray:
    a0, a1, lf, h0, p = theta
    t_host = a0 + a1 * L
    t_dev = F / (math.exp(lf) * H / (H + h0))
    return (t_host**p + t_dev**p) ** (1.0 / p)


def predict_time_s(law: TrainLaw, L, H, F) -> np.ndarray:
    th = np.array([law.a0_s, law.a1_s, math.log(law.fmax_flop_s), law.h0, law.p])
    return _time(th, np.asarray(L, float), np.asarray(H, float), np.asarray(F, float))


def predict_energy_j(law: TrainLaw, t_s, F, M) -> np.ndarray:
    return (
        law.p0_w * np.asarray(t_s)
        + law.ef_j_per_flop * np.asarray(F)
        + law.eb_j_per_byte * np.asarray(M)
    )


def _fit_time(L, H, F, t) -> np.ndarray:
    from scipy.optimize import least_squares

    x0 = np.array([0.005, 0.003, math.log(3e14), 300.0, 3.0])
    lo = np.array([0.0, 0.0, math.log(1e12), 0.0, 1.0])
    hi = np.array([1.0, 1.0, math.log(2e15), 1e5, 20.0])

    def res(th):
        return np.log(_time(th, L, H, F)) - np.log(t)

    return least_squares(res, x0, bounds=(lo, hi), x_scale="jac").x


def _fit_energy(t, F, M, E) -> np.ndarray:
    """Non-negative least squares on relative error (rows divided by E)."""
    from scipy.optimize import nnls

    A = np.column_stack([t, F * 1e-12, M * 1e-9]) / E[:, None]
    coef, _ = nnls(A, np.ones_like(E))
    return np.array([coef[0], coef[1] * 1e-12, coef[2] * 1e-9])


def fit(rows: Sequence[Mapping[str, float]], loo: bool = True) -> TrainLaw:
    """Fit the law to measured rows (keys layers, hidden, train_flops, bytes_moved, s_per_step,
    j_per_step; optional id). The time law is fitted on log time, the energy law on the
    measured times (relative least squares, constants ≥ 0)."""
    if len(rows) < 6:
        raise ValueError(f"the law has 8 constants: fit it on ≥ 6 configurations, got {len(rows)}")
    L, H, F, M, t, E = _arrays(rows)
    th = _fit_time(L, H, F, t)
    ce = _fit_energy(t, F, M, E)
    q90 = 0.1
    if loo and len(rows) >= 8:
        errs = []
        for i in range(len(rows)):
            keep = np.arange(len(rows)) != i
            thi = _fit_time(L[keep], H[keep], F[keep], t[keep])
            cei = _fit_energy(t[keep], F[keep], M[keep], E[keep])
            ti = _time(thi, L[i : i + 1], H[i : i + 1], F[i : i + 1])[0]
            ei = cei[0] * ti + cei[1] * F[i] + cei[2] * M[i]
            errs.append(abs(ei / E[i] - 1.0))
        q90 = float(np.quantile(errs, 0.9))
    return TrainLaw(
        a0_s=float(th[0]),
        a1_s=float(th[1]),
        fmax_flop_s=float(math.exp(th[2])),
        h0=float(th[3]),
        p=float(th[4]),
        p0_w=float(ce[0]),
        ef_j_per_flop=float(ce[1]),
        eb_j_per_byte=float(ce[2]),
        rel_err_q90=q90,
        fitted_on=[str(r.get("id", i)) for i, r in enumerate(rows)],
    )


def _arrays(rows):
    def col(k):
        return np.array([float(r[k]) for r in rows])

    return (
        col("layers"),
        col("hidden"),
        col("train_flops"),
        col("bytes_moved"),
        col("s_per_step"),
        col("j_per_step"),
    )


def predict_rows(
    law: TrainLaw, rows: Sequence[Mapping[str, float]]
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, joules) per step for rows holding layers, hidden, train_flops, bytes_moved."""
    L = np.array([float(r["layers"]) for r in rows])
    H = np.array([float(r["hidden"]) for r in rows])
    F = np.array([float(r["train_flops"]) for r in rows])
    M = np.array([float(r["bytes_moved"]) for r in rows])
    t = predict_time_s(law, L, H, F)
    return t, predict_energy_j(law, t, F, M)


def predict_config(law: TrainLaw, cfg, gpus: int = 1, strategy: str = "none") -> dict[str, Any]:
    """Joules and seconds per step of `cfg` on `gpus` GPUs, with an interval."""
    from jouleprof.predict.train_features import train_features

    if gpus > 1 and strategy == "none":
        raise ValueError("gpus > 1 needs a strategy: ddp, fsdp or tp")
    if strategy == "tp" and (cfg.hidden % gpus or cfg.heads % gpus):
        raise ValueError(
            f"tensor parallelism over {gpus} GPUs needs hidden ({cfg.hidden}) and heads "
            f"({cfg.heads}) divisible by {gpus}"
        )
    f = train_features(cfg, gpus=gpus, strategy=strategy)
    share = 1.0 / gpus if strategy == "tp" else 1.0
    F, M = f["train_flops"] * share, f["bytes_moved"] * share
    t1 = float(predict_time_s(law, [cfg.layers], [cfg.hidden], [F])[0])
    eta = law.eta if law.eta is not None else 1.0
    t = t1 / eta
    e_gpu = float(predict_energy_j(law, [t], [F], [M])[0])
    e = gpus * e_gpu + law.eb_j_per_byte * f["comm_bytes"] * gpus
    half = law.rel_err_q90
    lo, hi = e * (1 - half), e * (1 + half)
    notes = []
    if gpus > 1 and law.eta is None:
        # η ∈ [ETA_LO, 1]: time up to 1/ETA_LO longer, static energy with it
        e_slow = gpus * float(predict_energy_j(law, [t1 / ETA_LO], [F], [M])[0]) + (
            law.eb_j_per_byte * f["comm_bytes"] * gpus
        )
        hi = max(hi, e_slow * (1 + half))
        lo = e * (1 - half)
        notes.append(
            f"rests on an unfitted efficiency factor (η = 1 assumed; interval covers "
            f"η ∈ [{ETA_LO}, 1]): no multi-GPU data has been fitted"
        )
    samples = cfg.batch * (1 if strategy == "tp" else gpus)
    return {
        "j_per_step": e,
        "j_per_sample": e / samples,
        "s_per_step": t,
        "j_per_step_lo": lo,
        "j_per_step_hi": hi,
        "s_per_step_hi": t1 / ETA_LO if gpus > 1 and law.eta is None else t * (1 + half),
        "gpus": gpus,
        "strategy": strategy,
        "train_flops_per_step": f["train_flops"],
        "source": "predicted",
        "notes": notes,
    }
