"""The accuracy table of the training-energy law, rebuilt from a committed sweep (pure, no GPU).

Splits, each fitted from scratch on its training rows only:

- holdout-largest: every configuration of the largest model (most parameters) is held out;
- leave-one-axis-out: for each swept axis (layers, hidden, heads, seq, batch) the rows that
  vary only that axis are held out (and the largest model stays out of every fit).

Per split: MAPE of joules per step, the worst case, R² and the naive baseline (FLOPs × one
J/FLOP fitted on the same training rows) beside it; the pooled figures cover every held-out
prediction once per split. `evaluate(json_out)` prints it (`jouleprof predict evaluate --train`).
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
SWEEP_ENV = "JOULEPROF_BERT_SWEEP"
TARGET_MAPE_PCT = 7.0


def default_sweep_dir() -> Path:
    """benchmarks/results/bert_sweep of this checkout (or $JOULEPROF_BERT_SWEEP)."""
    if os.environ.get(SWEEP_ENV):
        return Path(os.environ[SWEEP_ENV])
    for base in (Path.cwd(), *Path(__file__).resolve().parents):
        p = base / "benchmarks" / "results" / "bert_sweep"
        if (p / "results.csv").is_file():
            return p
    raise FileNotFoundError(
        "no committed BERT sweep found (benchmarks/results/bert_sweep/results.csv): run from the "
        f"repository or set {SWEEP_ENV} to a sweep directory"
    )


def load_rows(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Complete one-GPU rows of results.csv with their proxies (predict.train_features)."""
    from jouleprof.predict.train_features import train_features
    from jouleprof.workloads.bert import BertTrainConfig

    path = Path(sweep_dir) / "results.csv"
    rows, seen = [], set()
    with path.open() as f:
        for r in csv.DictReader(f):
            if r.get("status") != "complete" or r.get("strategy", "none") not in ("", "none"):
                continue
            if r["id"] in seen:
                continue
            seen.add(r["id"])
            cfg = BertTrainConfig(**{k: int(r[k]) for k in AXES})
            feats = train_features(cfg)
            rows.append(
                {
                    "id": r["id"],
                    "role": r.get("role", ""),
                    **{k: int(r[k]) for k in AXES},
                    "s_per_step": float(r["s_per_step"]),
                    "j_per_step": float(r["j_per_step"]),
                    "params": feats["params"],
                    "train_flops": feats["train_flops"],
                    "bytes_moved": feats["bytes_moved"],
                }
            )
    if not rows:
        raise ValueError(f"{path} holds no complete one-GPU configuration")
    return rows


def splits(rows: Sequence[dict[str, Any]]) -> dict[str, tuple[list[int], list[int]]]:
    """name → (train indices, test indices)."""
    biggest = max(r["params"] for r in rows)
    large = {i for i, r in enumerate(rows) if r["params"] == biggest}
    out = {"holdout-largest": ([i for i in range(len(rows)) if i not in large], sorted(large))}
    for axis in AXES:
        test = [i for i, r in enumerate(rows) if r["role"] == f"axis-{axis}" and i not in large]
        if test:
            train = [i for i in range(len(rows)) if i not in large and i not in test]
            out[f"leave-{axis}-out"] = (train, test)
    return out


def _r2(y: np.ndarray, yhat: np.ndarray) -> float | None:
    if len(y) < 2 or float(np.var(y)) == 0.0:
        return None
    return float(1.0 - np.sum((y - yhat) ** 2) / np.sum((y - np.mean(y)) ** 2))


def _baseline_k(F: np.ndarray, E: np.ndarray) -> float:
    """J/FLOP minimizing the relative squared error of E ≈ k·F."""
    x = F / E
    return float(np.sum(x) / np.sum(x * x))


def evaluate_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fit every split and score it; the table as data."""
    from jouleprof.predict.scaling import fit, predict_rows

    table, pooled = [], {"law": [], "base": [], "y": [], "yl": [], "yb": []}
    for name, (tr, te) in splits(rows).items():
        train = [rows[i] for i in tr]
        test = [rows[i] for i in te]
        law = fit(train, loo=False)
        t_hat, e_hat = predict_rows(law, test)
        E = np.array([r["j_per_step"] for r in test])
        T = np.array([r["s_per_step"] for r in test])
        F = np.array([r["train_flops"] for r in test])
        k = _baseline_k(
            np.array([r["train_flops"] for r in train]), np.array([r["j_per_step"] for r in train])
        )
        base = k * F
        err = 100 * (e_hat / E - 1)
        berr = 100 * (base / E - 1)
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
                "baseline_mape_pct": float(np.mean(np.abs(berr))),
                "baseline_worst_pct": float(berr[int(np.argmax(np.abs(berr)))]),
                "baseline_j_per_flop": k,
                "per_config": [
                    {
                        "id": r["id"],
                        "measured_j": float(e),
                        "predicted_j": float(p),
                        "err_pct": float(x),
                        "baseline_err_pct": float(b),
                    }
                    for r, e, p, x, b in zip(test, E, e_hat, err, berr, strict=True)
                ],
            }
        )
        pooled["law"] += list(np.abs(err))
        pooled["base"] += list(np.abs(berr))
        pooled["y"] += list(E)
        pooled["yl"] += list(e_hat)
        pooled["yb"] += list(base)
    y = np.array(pooled["y"])
    summary = {
        "mape_pct": float(np.mean(pooled["law"])),
        "worst_abs_pct": float(np.max(pooled["law"])),
        "r2": _r2(y, np.array(pooled["yl"])),
        "baseline_mape_pct": float(np.mean(pooled["base"])),
        "baseline_r2": _r2(y, np.array(pooled["yb"])),
        "target_mape_pct": TARGET_MAPE_PCT,
    }
    summary["target_met"] = bool(all(row["mape_pct"] <= TARGET_MAPE_PCT for row in table))
    full = fit(list(rows), loo=True)
    return {
        "n_configs": len(rows),
        "splits": table,
        "pooled": summary,
        "law_all_rows": full.to_json(),
    }


def evaluate(json_out: bool = False, sweep_dir: str | Path | None = None) -> dict[str, Any]:
    """Rebuild and print the accuracy table from the committed sweep."""
    result = evaluate_rows(load_rows(sweep_dir or default_sweep_dir()))
    if json_out:
        print(json.dumps(result, indent=2))
        return result
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Training-energy law, BERT on one H200 ({result['n_configs']} configs)")
    for c in (
        "split",
        "train",
        "test",
        "MAPE %",
        "worst %",
        "R²",
        "time MAPE %",
        "FLOPs×J/FLOP MAPE %",
    ):
        t.add_column(c, justify="right")
    for r in result["splits"]:
        t.add_row(
            r["split"],
            str(r["n_train"]),
            str(r["n_test"]),
            f"{r['mape_pct']:.1f}",
            f"{r['worst_pct']:+.1f}",
            "-" if r["r2"] is None else f"{r['r2']:.3f}",
            f"{r['time_mape_pct']:.1f}",
            f"{r['baseline_mape_pct']:.1f}",
        )
    p = result["pooled"]
    t.add_row(
        "pooled",
        "",
        "",
        f"{p['mape_pct']:.1f}",
        f"±{p['worst_abs_pct']:.1f}",
        "-" if p["r2"] is None else f"{p['r2']:.3f}",
        "",
        f"{p['baseline_mape_pct']:.1f}",
    )
    console = Console(width=max(Console().width, 110))
    console.print(t)
    verdict = "met" if p["target_met"] else "NOT met"
    console.print(f"target MAPE ≤ {TARGET_MAPE_PCT:g} % on every split: {verdict}")
    return result
