"""The accuracy table of the training-energy law, rebuilt from a committed sweep (pure, no GPU).

Splits, each fitted from scratch on its training rows only:

- holdout-largest: every configuration of the largest model (most parameters) is held out;
- leave-one-family-out: for each family of the sweep's plan (the rows that vary one axis —
  layers, hidden, heads, seq, batch — around the base point, the mixed points, the
  compute-bound points) those rows are held out, and the largest model stays out of every fit.

Per split: MAPE of joules per step, the worst case, R², the time's MAPE, how many held-out rows
the prediction interval (fitted on the training rows) covers, and two baselines fitted on the
same training rows: FLOPs × one J/FLOP, and a line in FLOPs and bytes. Pooled figures cover every
held-out prediction once per split. The repeatability floor is the spread of configurations the
sweep measured twice. `evaluate(json_out)` prints it (`jouleprof predict evaluate --train`).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

AXES = ("layers", "hidden", "heads", "seq", "batch")
FAMILIES = (*(f"axis-{a}" for a in AXES), "mixed", "compute")
SWEEP_ENV = "JOULEPROF_BERT_SWEEP"
TARGET_MAPE_PCT = 7.0


def default_sweep_dir() -> Path:
    """benchmarks/results/bert_sweep of this checkout (or $JOULEPROF_BERT_SWEEP)."""
    from jouleprof.predict.committed import committed_results

    if os.environ.get(SWEEP_ENV):
        return Path(os.environ[SWEEP_ENV])
    found = committed_results("bert_sweep", "results.csv")
    if found is not None:
        return found
    raise FileNotFoundError(
        "no committed BERT sweep found (benchmarks/results/bert_sweep/results.csv): run from the "
        f"repository or set {SWEEP_ENV} to a sweep directory"
    )


def sweep_table(sweep_dir: str | Path) -> Path:
    """The table of a BERT sweep: results.csv (benchmarks/bert_sweep.py) or, in a
    `jouleprof study bert` folder, its runs.csv; FileNotFoundError naming both otherwise."""
    for name in ("results.csv", "runs.csv"):
        if (Path(sweep_dir) / name).is_file():
            return Path(sweep_dir) / name
    raise FileNotFoundError(
        f"{sweep_dir} has no results.csv or runs.csv: give a BERT sweep directory "
        "(`jouleprof study bert --out DIR` writes one)"
    )


def axis_roles(points: Sequence[dict[str, Any]]) -> list[str]:
    """Each configuration's family in an axes design (one axis varied at a time around a base):
    the base holds every axis's most common value; "axis-<name>" differs from it in that axis
    alone, "base" in none, "mixed" in several."""
    base = {}
    for a in AXES:
        values = [p[a] for p in points]
        base[a] = max(values, key=values.count)  # the first most common, in sweep order
    roles = []
    for p in points:
        off = [a for a in AXES if p[a] != base[a]]
        roles.append("base" if not off else f"axis-{off[0]}" if len(off) == 1 else "mixed")
    return roles


def load_rows(sweep_dir: str | Path, strategies: bool = False) -> list[dict[str, Any]]:
    """Complete rows of a sweep's table (`sweep_table`; the first per id) with their proxies
    (predict.train_features): one-GPU strategy-none rows, or with `strategies` the one-GPU rows
    of the other strategies. A study's runs.csv, which names no family, gets `axis_roles`."""
    from jouleprof.predict.train_features import train_features
    from jouleprof.workloads.bert import BertTrainConfig

    path = sweep_table(sweep_dir)
    rows, seen, no_energy = [], set(), 0
    with path.open() as f:
        reader = csv.DictReader(f)
        named_roles = "role" in (reader.fieldnames or ())
        for r in reader:
            r.setdefault("id", r.get("cell_id", ""))
            is_none = r.get("strategy", "none") in ("", "none")
            one_gpu = int(float(r.get("gpus") or 1)) == 1
            if r.get("status") != "complete" or r["id"] in seen or is_none == strategies:
                continue
            if not one_gpu:  # a multi-GPU cell: its ratios are bert_sweep_multi's to fit
                continue
            if not r.get("j_per_step"):  # no energy measured (a run without a GPU)
                no_energy += 1
                continue
            seen.add(r["id"])
            cfg = BertTrainConfig(**{k: int(r[k]) for k in AXES})
            feats = train_features(cfg)
            rows.append(
                {
                    "id": r["id"],
                    "role": r.get("role", ""),
                    "strategy": r.get("strategy") or "none",
                    **{k: int(r[k]) for k in AXES},
                    "s_per_step": float(r["s_per_step"]),
                    "j_per_step": float(r["j_per_step"]),
                    "params": feats["params"],
                    "train_flops": feats["train_flops"],
                    "bytes_moved": feats["bytes_moved"],
                }
            )
    if not named_roles and rows:
        for r, role in zip(rows, axis_roles(rows), strict=True):
            r["role"] = role
    if not rows and not strategies:
        raise ValueError(
            f"{path} holds no complete one-GPU configuration with a measured energy"
            + (f" ({no_energy} complete without one: run without a GPU)" if no_energy else "")
        )
    return rows


def splits(rows: Sequence[dict[str, Any]]) -> dict[str, tuple[list[int], list[int]]]:
    """name → (train indices, test indices)."""
    biggest = max(r["params"] for r in rows)
    large = {i for i, r in enumerate(rows) if r["params"] == biggest}
    out = {"holdout-largest": ([i for i in range(len(rows)) if i not in large], sorted(large))}
    for fam in FAMILIES:
        test = [i for i, r in enumerate(rows) if r["role"] == fam and i not in large]
        if test:
            train = [i for i in range(len(rows)) if i not in large and i not in test]
            out[f"leave-{fam.removeprefix('axis-')}-out"] = (train, test)
    return out


def _r2(y: np.ndarray, yhat: np.ndarray) -> float | None:
    if len(y) < 3 or float(np.std(y) / np.mean(y)) < 0.05:
        return None  # R² of rows that barely differ says nothing
    return float(1.0 - np.sum((y - yhat) ** 2) / np.sum((y - np.mean(y)) ** 2))


def _baselines(train, test) -> dict[str, np.ndarray]:
    """FLOPs × J/FLOP, and c0 + c1·F + c2·M (≥ 0), both on relative error."""
    from scipy.optimize import nnls

    def cols(rs, which):
        F = np.array([r["train_flops"] for r in rs])
        M = np.array([r["bytes_moved"] for r in rs])
        return F[:, None] if which == "flops" else np.column_stack([np.ones_like(F), F, M])

    E = np.array([r["j_per_step"] for r in train])
    out = {}
    for which in ("flops", "linear"):
        X = cols(train, which)
        sc = X.max(axis=0)
        c, _ = nnls(X / sc / E[:, None], np.ones_like(E))
        out[which] = cols(test, which) @ (c / sc)
    return out


def repeatability(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rows the law cannot tell apart (the same layers, hidden size, FLOPs and bytes: repeats of a
    configuration, or head counts that change neither): the relative spread of their measured J
    and s per step, a floor under the error any law on these proxies can reach."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["layers"], r["hidden"], r["train_flops"], r["bytes_moved"])
        groups.setdefault(key, []).append(r)
    out = []
    for rs in groups.values():
        if len(rs) < 2:
            continue
        e = np.array([r["j_per_step"] for r in rs])
        t = np.array([r["s_per_step"] for r in rs])
        out.append(
            {
                "ids": [r["id"] for r in rs],
                "same_configuration": len({tuple(r[k] for k in AXES) for r in rs}) == 1,
                "j_spread_pct": float(100 * (e.max() - e.min()) / e.mean()),
                "s_spread_pct": float(100 * (t.max() - t.min()) / t.mean()),
            }
        )
    worst = max((g["j_spread_pct"] for g in out), default=None)
    return {"groups": out, "max_j_spread_pct": worst}


def evaluate_rows(
    rows: Sequence[dict[str, Any]], strategy_rows: Sequence[dict[str, Any]] = (), gpu: str = "h200"
) -> dict[str, Any]:
    """Fit every split and score it; the table as data."""
    from jouleprof.predict.scaling import fit, predict_rows
    from jouleprof.predict.train_laws import ceilings

    ceil = ceilings(gpu)
    table = []
    pooled: dict[str, list[float]] = {k: [] for k in ("err", "y", "yl", "flops", "lin", "inside")}
    for name, (tr, te) in splits(rows).items():
        train = [rows[i] for i in tr]
        test = [rows[i] for i in te]
        law = fit(train, loo=True, **ceil)
        t_hat, e_hat = predict_rows(law, test)
        E = np.array([r["j_per_step"] for r in test])
        T = np.array([r["s_per_step"] for r in test])
        base = _baselines(train, test)
        err = 100 * (e_hat / E - 1)
        berr = 100 * (base["flops"] / E - 1)
        lerr = 100 * (base["linear"] / E - 1)
        inside = np.abs(err) <= 100 * law.rel_err_q90
        worst = int(np.argmax(np.abs(err)))
        table.append(
            {
                "split": name,
                "n_train": len(train),
                "n_test": len(test),
                "mape_pct": float(np.mean(np.abs(err))),
                "worst_pct": float(err[worst]),
                "worst_id": test[worst]["id"],
                "r2": _r2(E, e_hat),
                "time_mape_pct": float(np.mean(np.abs(100 * (t_hat / T - 1)))),
                "interval_half_width_pct": 100 * law.rel_err_q90,
                "interval_covers": int(inside.sum()),
                "baseline_mape_pct": float(np.mean(np.abs(berr))),
                "linear_baseline_mape_pct": float(np.mean(np.abs(lerr))),
                "per_config": [
                    {
                        "id": r["id"],
                        "measured_j": float(e),
                        "predicted_j": float(p),
                        "err_pct": float(x),
                        "time_err_pct": float(100 * (th / tm - 1)),
                        "baseline_err_pct": float(b),
                    }
                    for r, e, p, x, th, tm, b in zip(
                        test, E, e_hat, err, t_hat, T, berr, strict=True
                    )
                ],
            }
        )
        pooled["err"] += list(np.abs(err))
        pooled["flops"] += list(np.abs(berr))
        pooled["lin"] += list(np.abs(lerr))
        pooled["y"] += list(E)
        pooled["yl"] += list(e_hat)
        pooled["inside"] += list(inside.astype(float))
    summary = {
        "mape_pct": float(np.mean(pooled["err"])),
        "worst_abs_pct": float(np.max(pooled["err"])),
        "r2": _r2(np.array(pooled["y"]), np.array(pooled["yl"])),
        "interval_coverage": float(np.mean(pooled["inside"])),
        "baseline_mape_pct": float(np.mean(pooled["flops"])),
        "linear_baseline_mape_pct": float(np.mean(pooled["lin"])),
        "target_mape_pct": TARGET_MAPE_PCT,
    }
    summary["target_met"] = bool(all(row["mape_pct"] <= TARGET_MAPE_PCT for row in table))
    full = fit(list(rows), loo=True, **ceil)
    return {
        "n_configs": len(rows),
        "gpu": gpu,
        "splits": table,
        "pooled": summary,
        "repeatability": repeatability(rows),
        "strategies_one_gpu": strategy_check(full, rows, strategy_rows),
        "law_all_rows": full.to_json(),
    }


def strategy_check(law, rows, strategy_rows) -> list[dict[str, Any]]:
    """Each strategy measured on one GPU: its time and energy ratios to strategy none at the same
    configuration, and the energy the law predicts from the time ratio alone."""
    from dataclasses import replace

    from jouleprof.predict.train_laws import overheads_from
    from jouleprof.predict.train_multi import predict_config
    from jouleprof.workloads.bert import BertTrainConfig

    over = overheads_from(rows, strategy_rows)
    law = replace(law, strategy_overhead=over)
    out = []
    for s, o in over.items():
        r = next(x for x in strategy_rows if x["id"] == o["row"])
        cfg = BertTrainConfig(**{k: r[k] for k in AXES}, strategy=s)
        pred = predict_config(law, cfg, 1, s)
        out.append(
            {
                **o,
                "strategy": s,
                "predicted_j": pred["j_per_step"],
                "measured_j": r["j_per_step"],
                "err_pct": 100 * (pred["j_per_step"] / r["j_per_step"] - 1),
            }
        )
    return out


def evaluate(
    json_out: bool = False, sweep_dir: str | Path | None = None, gpu: str = "h200"
) -> dict[str, Any]:
    """Rebuild and print the accuracy table from a sweep (the committed one by default), with
    `gpu`'s ceilings."""
    d = sweep_dir or default_sweep_dir()
    result = evaluate_rows(load_rows(d), load_rows(d, strategies=True), gpu=gpu)
    if json_out:
        print(json.dumps(result, indent=2))
        return result
    from jouleprof.predict.train_report import print_table

    print_table(result)
    return result
