"""Fitted constants of the training-energy law (predict.scaling.TrainLaw), per workload, GPU
and precision. Rebuilt from a committed sweep by `python -m jouleprof.predict.train_laws DIR`
(fits every complete one-GPU row of DIR/results.csv, and reads the one-GPU strategy rows for the
wrappers' measured cost); the accuracy of the law's form is measured on held-out splits by
predict.train_evaluate, not by these in-sample constants.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

AXES = ("layers", "hidden", "heads", "seq", "batch")

# BERT masked-LM, one NVIDIA H200 (700 W limit), bf16 autocast: benchmarks/results/bert_sweep
# (33 one-GPU configurations over two calls, and the one-GPU DDP/FSDP2/TP rows for the
# wrappers' cost; torch 2.11.0+cu130), rebuilt with
# `python -m jouleprof.predict.train_laws benchmarks/results/bert_sweep`.
LAWS: dict[tuple[str, str, str], dict] = {
    ("bert", "h200", "bf16"): {
        "a0_s": 0.004462127973804797,
        "a1_s": 0.0028508303220426173,
        "rate_flop_s": 678599999999999.1,
        "h0": 1254.5198060826344,
        "p": 2.7964678424778002,
        "mem_bytes_s": 4188000000000.0,
        "p0_w": 114.75036833473061,
        "ef_j_per_flop": 1.2618649659005983e-12,
        "ew_j_per_flop": 5.743561896968011e-10,
        "eb_j_per_byte": 8.894761886676046e-11,
        "rel_err_q90": 0.08987887523158611,
        "t_rel_err_q90": 0.16061886065144199,
        "strategy_overhead": {
            "ddp": {
                "row": "34-L12-H768-A12-S128-B32-ddp",
                "time_ratio": 1.106179497839974,
                "energy_ratio": 1.0887436546847586,
                "reference_rows": ["00-L12-H768-A12-S128-B32", "33-L12-H768-A12-S128-B32"],
            },
            "fsdp": {
                "row": "35-L12-H768-A12-S128-B32-fsdp",
                "time_ratio": 2.002211928878453,
                "energy_ratio": 1.5204465711475115,
                "reference_rows": ["00-L12-H768-A12-S128-B32", "33-L12-H768-A12-S128-B32"],
            },
            "tp": {
                "row": "36-L12-H768-A12-S128-B32-tp",
                "time_ratio": 3.7240530063812916,
                "energy_ratio": 2.2800739301763158,
                "reference_rows": ["00-L12-H768-A12-S128-B32", "33-L12-H768-A12-S128-B32"],
            },
        },
    },
}


def ceilings(gpu: str) -> dict[str, float]:
    """The GPU's measured memory bandwidth and bf16 matmul ceiling (predict/gpus/<gpu>.json)."""
    from jouleprof.predict.roofline import load_gpu

    g = load_gpu(gpu)
    return {"mem_bytes_s": g.mem_bytes_s, "rate_flop_s": g.matmul_flops_s["bf16"]}


def overheads_from(
    rows: Sequence[dict[str, Any]], strategy_rows: Sequence[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per strategy measured on one GPU: time and energy ratios to the strategy-none rows of the
    same configuration (their mean where it was measured more than once)."""
    out: dict[str, dict[str, Any]] = {}
    for s in strategy_rows:
        same = [r for r in rows if all(r[k] == s[k] for k in AXES)]
        if not same or s["strategy"] in out:
            continue
        t0 = sum(r["s_per_step"] for r in same) / len(same)
        e0 = sum(r["j_per_step"] for r in same) / len(same)
        out[s["strategy"]] = {
            "row": s["id"],
            "time_ratio": s["s_per_step"] / t0,
            "energy_ratio": s["j_per_step"] / e0,
            "reference_rows": [r["id"] for r in same],
        }
    return out


def get_law(workload: str, gpu: str, precision: str):
    """The fitted law for (workload, gpu, precision); ValueError naming what exists."""
    from jouleprof.predict.scaling import TrainLaw

    key = (workload.lower(), gpu.lower(), precision.lower())
    if key not in LAWS:
        have = ", ".join("/".join(k) for k in LAWS) or "none"
        raise ValueError(
            f"no fitted law for workload/gpu/precision {'/'.join(key)}: fitted are {have}"
        )
    return TrainLaw.from_json(LAWS[key])


def build(sweep_dir: str | Path, gpu: str = "h200") -> dict[str, Any]:
    """The law's constants fitted on every complete row of a sweep."""
    from dataclasses import replace

    from jouleprof.predict.scaling import fit
    from jouleprof.predict.train_evaluate import load_rows

    rows = load_rows(sweep_dir)
    law = fit(rows, loo=True, **ceilings(gpu))
    law = replace(law, strategy_overhead=overheads_from(rows, load_rows(sweep_dir, True)))
    d = law.to_json()
    d.pop("fitted_on")
    return d


BOOTSTRAPPED = (
    "a0_s",
    "a1_s",
    "h0",
    "p",
    "p0_w",
    "ef_j_per_flop",
    "ew_j_per_flop",
    "eb_j_per_byte",
)


def bootstrap(
    sweep_dir: str | Path, n: int = 200, seed: int = 0, gpu: str = "h200"
) -> dict[str, list[float]]:
    """The fitted constants' 5th, 50th and 95th percentiles over `n` fits to rows resampled with
    replacement (resamples with fewer than 10 distinct rows are skipped)."""
    import numpy as np

    from jouleprof.predict.scaling import fit
    from jouleprof.predict.train_evaluate import load_rows

    rows = load_rows(sweep_dir)
    rng = np.random.default_rng(seed)
    fits = []
    for _ in range(n):
        idx = rng.integers(0, len(rows), len(rows))
        if len(set(idx.tolist())) >= 10:
            law = fit([rows[i] for i in idx], loo=False, **ceilings(gpu))
            fits.append([getattr(law, k) for k in BOOTSTRAPPED])
    q = np.percentile(np.array(fits), [5, 50, 95], axis=0)
    return {k: [float(v) for v in q[:, j]] for j, k in enumerate(BOOTSTRAPPED)}


def main(argv: list[str]) -> int:
    """DIR [--bootstrap N]: the constants fitted on DIR's rows, or their bootstrap percentiles."""
    if len(argv) == 3 and argv[1] == "--bootstrap":
        print(json.dumps(bootstrap(Path(argv[0]), int(argv[2])), indent=4))
        return 0
    if len(argv) != 1:
        print("usage: python -m jouleprof.predict.train_laws SWEEP_DIR [--bootstrap N]")
        return 2
    print(json.dumps(build(Path(argv[0])), indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
