"""The several-GPU efficiency factor of the training-energy law, fitted on measured rows and
judged on rows it did not see (pure functions of a one-GPU law and measured rows).

predict.train_multi prices N GPUs as t_N = o_s · t_1(share) + κ_s · C / B with the wrapper's
one-GPU time ratio o_s and an unfitted exposed share κ_s of the communication C at the datasheet
link bandwidth B. κ_s and B are not separable from step times (only their ratio moves t_N), so
per strategy the fit takes two numbers from the measured rows:

    t_N ≈ o · t_1(share) + β · C            (o ≥ 0, β ≥ 0 s per byte exposed)

by non-negative least squares on relative time errors (each row divided by its measured
t_N). The energy is then the one-GPU law's at that time, per GPU, times N (its static power over
t_N and its dynamic energy per FLOP and per byte moved, communication bytes included): nothing
in it is refitted, so the energy's error measures the law's form on several GPUs.

`evaluate` judges the fit the two ways a user would lean on it: within one GPU count, each
configuration predicted from a fit that left it out; and across counts, every row at a larger
count predicted from a fit on the smaller counts only. Beside each: two naive baselines, ideal
scaling (N × the one-GPU law on the share, no wrapper cost, no communication) and the shipped
unfitted estimate (κ defaults, datasheet bandwidth).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jouleprof.predict.scaling import TrainLaw, predict_energy_j


@dataclass(frozen=True)
class MultiRow:
    """One measured configuration on `gpus` GPUs (per-GPU batch, as the protocol runs it)."""

    id: str
    cfg: Any
    """The BERT configuration (workloads.bert.BertTrainConfig, its strategy set)."""
    gpus: int
    s_per_step: float
    j_per_step: float
    """Energy per step summed over the GPUs."""

    @property
    def strategy(self) -> str:
        return self.cfg.strategy


@dataclass(frozen=True)
class StrategyFit:
    """The fitted factor of one strategy."""

    strategy: str
    time_ratio: float
    """o: the wrapper's time ratio on the one-GPU law's time of the share."""
    s_per_byte: float
    """β: exposed seconds per byte each GPU communicates."""
    rows: tuple[str, ...]
    gpus: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "time_ratio": self.time_ratio,
            "s_per_byte": self.s_per_byte,
            "effective_link_gb_s": 1e-9 / self.s_per_byte if self.s_per_byte > 0 else None,
            "rows": list(self.rows),
            "gpus": list(self.gpus),
        }


def _terms(law: TrainLaw, row: MultiRow) -> tuple[float, float, dict[str, float]]:
    """(t_1 of the share on the one-GPU law, communication bytes per GPU, the share)."""
    from jouleprof.predict.train_multi import _step, share

    sh = share(row.cfg, row.gpus, row.strategy)
    t1 = _step(law, row.cfg, sh, 1.0, 0.0)[0]
    return t1, sh["comm_bytes"], sh


def fit_strategy(law: TrainLaw, rows: Sequence[MultiRow]) -> StrategyFit:
    """o and β of one strategy's rows (one row: o from the law's one-GPU ratio, β from the
    rest of its time).

    Raises:
        ValueError: no rows, rows of several strategies, or a row on one GPU.
    """
    from scipy.optimize import nnls

    from jouleprof.predict.train_multi import strategy_overhead

    if not rows:
        raise ValueError("no rows to fit")
    strategies = {r.strategy for r in rows}
    if len(strategies) != 1 or strategies & {"none"}:
        raise ValueError(f"fit one strategy of ddp, fsdp, tp at a time, got {sorted(strategies)}")
    if any(r.gpus < 2 for r in rows):
        raise ValueError("the several-GPU factor is fitted on rows of ≥ 2 GPUs")
    (strategy,) = strategies
    terms = [_terms(law, r) for r in rows]
    t = np.array([r.s_per_step for r in rows])
    t1 = np.array([x[0] for x in terms])
    c = np.array([x[1] for x in terms])
    if len(rows) == 1:
        o = strategy_overhead(law, strategy)[0]
        beta = max(float((t[0] - o * t1[0]) / c[0]), 0.0) if c[0] > 0 else 0.0
    else:
        scale = max(float(np.median(c)), 1.0)  # columns of like size for the solver
        a = np.column_stack([t1 / t, c / scale / t])
        (o, b), _ = nnls(a, np.ones_like(t))
        beta = float(b) / scale
    return StrategyFit(
        strategy=strategy,
        time_ratio=float(o),
        s_per_byte=beta,
        rows=tuple(r.id for r in rows),
        gpus=tuple(sorted({r.gpus for r in rows})),
    )


def fit(law: TrainLaw, rows: Sequence[MultiRow]) -> dict[str, StrategyFit]:
    """Per strategy present in `rows`, its fitted factor."""
    by: dict[str, list[MultiRow]] = {}
    for r in rows:
        by.setdefault(r.strategy, []).append(r)
    return {s: fit_strategy(law, rs) for s, rs in sorted(by.items())}


def predict_fitted(law: TrainLaw, f: StrategyFit, cfg, gpus: int) -> tuple[float, float]:
    """(J per step over the GPUs, s per step) of `cfg` on `gpus` GPUs under the fitted factor."""
    row = MultiRow("", cfg, gpus, 1.0, 1.0)
    t1, c, sh = _terms(law, row)
    t = f.time_ratio * t1 + f.s_per_byte * c
    e = predict_energy_j(
        law, [t], [cfg.hidden], [sh["train_flops"]], [sh["bytes_moved"] + sh["comm_bytes"]]
    )[0]
    return gpus * float(e), t


def _ideal(law: TrainLaw, row: MultiRow) -> tuple[float, float]:
    t1, _, sh = _terms(law, row)
    e = predict_energy_j(law, [t1], [row.cfg.hidden], [sh["train_flops"]], [sh["bytes_moved"]])
    return row.gpus * float(e[0]), t1


def _datasheet(law: TrainLaw, row: MultiRow) -> tuple[float, float]:
    from dataclasses import replace

    from jouleprof.predict.train_multi import predict_config

    p = predict_config(replace(law, multi_gpu={}), row.cfg, row.gpus, row.strategy)
    return p["j_per_step"], p["s_per_step"]


def _errors(rows: Sequence[MultiRow], preds: Sequence[tuple[float, float]]) -> dict[str, Any]:
    ej = np.array([100 * (p[0] / r.j_per_step - 1) for r, p in zip(rows, preds, strict=True)])
    et = np.array([100 * (p[1] / r.s_per_step - 1) for r, p in zip(rows, preds, strict=True)])
    worst = int(np.argmax(np.abs(ej)))
    return {
        "n": len(rows),
        "mape_j_pct": float(np.mean(np.abs(ej))),
        "worst_j_pct": float(ej[worst]),
        "worst_row": rows[worst].id,
        "mape_s_pct": float(np.mean(np.abs(et))),
        "worst_s_pct": float(et[int(np.argmax(np.abs(et)))]),
    }


def _judge(
    law: TrainLaw,
    test: Sequence[MultiRow],
    fitted: Callable[[MultiRow], tuple[float, float] | None],
) -> dict[str, Any]:
    """Errors of the fitted predictions on `test` (rows it could not predict are named) and of
    both baselines on the same rows."""
    pairs = [(r, fitted(r)) for r in test]
    done = [(r, p) for r, p in pairs if p is not None]
    rows = [r for r, _ in done]
    if not rows:
        return {"n": 0, "not_predicted": [r.id for r in test]}
    return {
        "fitted": _errors(rows, [p for _, p in done]),
        "ideal_scaling": _errors(rows, [_ideal(law, r) for r in rows]),
        "datasheet": _errors(rows, [_datasheet(law, r) for r in rows]),
        "rows": [
            {
                "id": r.id,
                "gpus": r.gpus,
                "strategy": r.strategy,
                "measured_j": r.j_per_step,
                "predicted_j": p[0],
                "err_j_pct": 100 * (p[0] / r.j_per_step - 1),
                "measured_s": r.s_per_step,
                "predicted_s": p[1],
                "err_s_pct": 100 * (p[1] / r.s_per_step - 1),
            }
            for r, p in done
        ],
        "not_predicted": [r.id for r, p in pairs if p is None],
    }


def evaluate(law: TrainLaw, rows: Sequence[MultiRow]) -> dict[str, Any]:
    """The fit judged on rows it left out: per GPU count, leave one configuration out (every
    strategy's row of it predicted from the strategy's other rows); across counts, each larger
    count's rows from a fit on the smaller counts. Also the fit on every row (in-sample), the
    factor to state."""
    out: dict[str, Any] = {"fit_all": {s: f.to_json() for s, f in fit(law, rows).items()}}
    counts = sorted({r.gpus for r in rows})
    within: dict[str, Any] = {}
    for n in counts:
        at = [r for r in rows if r.gpus == n]

        def loo(r: MultiRow, at=at, n=n):
            rest = [x for x in at if x.strategy == r.strategy and x.id != r.id]
            if not rest:
                return None
            return predict_fitted(law, fit_strategy(law, rest), r.cfg, n)

        within[str(n)] = _judge(law, at, loo)
    out["leave_one_out_within_count"] = within
    across: dict[str, Any] = {}
    for n in counts[1:]:
        smaller = [r for r in rows if r.gpus < n]
        fits = fit(law, smaller)

        def from_smaller(r: MultiRow, fits=fits):
            f = fits.get(r.strategy)
            return None if f is None else predict_fitted(law, f, r.cfg, r.gpus)

        key = f"{n}_from_{'+'.join(str(c) for c in counts if c < n)}"
        across[key] = _judge(law, [r for r in rows if r.gpus == n], from_smaller)
    out["larger_from_smaller"] = across
    return out


def law_block(law: TrainLaw, rows: Sequence[MultiRow]) -> dict[str, dict[str, Any]]:
    """TrainLaw.multi_gpu from measured rows: per strategy the fit on every row, with the 90th
    percentile of its leave-one-out errors (within each GPU count) as its intervals' half-width
    (None where no row could be left out)."""
    ev = evaluate(law, rows)
    errs: dict[str, dict[str, list[float]]] = {}
    for v in ev["leave_one_out_within_count"].values():
        for r in v.get("rows", []):
            e = errs.setdefault(r["strategy"], {"j": [], "s": []})
            e["j"].append(abs(r["err_j_pct"]) / 100)
            e["s"].append(abs(r["err_s_pct"]) / 100)
    out = {}
    for s, f in ev["fit_all"].items():
        e = errs.get(s)
        out[s] = {
            **f,
            "rel_err_q90": float(np.quantile(e["j"], 0.9)) if e else None,
            "t_rel_err_q90": float(np.quantile(e["s"], 0.9)) if e else None,
            "held_out_rows": len(e["j"]) if e else 0,
        }
    return out
