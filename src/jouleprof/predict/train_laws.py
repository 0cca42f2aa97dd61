"""Fitted constants of the training-energy law (predict.scaling.TrainLaw), per workload, GPU
and precision. Rebuilt from a committed sweep by `python -m jouleprof.predict.train_laws DIR`
(fits every complete one-GPU row of DIR/results.csv); the accuracy of the law's form is
measured on held-out splits by predict.train_evaluate, not by these in-sample constants.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# BERT masked-LM, one NVIDIA H200 (700 W limit), bf16 autocast: benchmarks/results/bert_sweep,
# 21 configurations measured 2026-12-01 (torch 2.11.0+cu130).
LAWS: dict[tuple[str, str, str], dict] = {
    ("bert", "h200", "bf16"): {
        "a0_s": 0.003524771024423802,
        "a1_s": 0.0029786145869002546,
        "fmax_flop_s": 1999999999999987.2,
        "h0": 5875.092654891702,
        "p": 3.228408239831446,
        "p0_w": 129.68004141873826,
        "ef_j_per_flop": 1.874979529324521e-12,
        "eb_j_per_byte": 6.450286279644559e-11,
        "rel_err_q90": 0.1501626380750788,
        "eta": None,
    },
}


def get_law(workload: str, gpu: str, precision: str):
    """The fitted law for (workload, gpu, precision); ValueError naming what exists."""
    from jouleprof.predict.scaling import TrainLaw

    key = (workload.lower(), gpu.lower(), precision.lower())
    if key not in LAWS:
        have = ", ".join("/".join(k) for k in LAWS)
        raise ValueError(
            f"no fitted law for workload/gpu/precision {'/'.join(key)}: fitted are {have}"
        )
    return TrainLaw.from_json(LAWS[key])


def main(argv: list[str]) -> int:
    from jouleprof.predict.scaling import fit
    from jouleprof.predict.train_evaluate import load_rows

    law = fit(load_rows(Path(argv[0])), loo=True).to_json()
    law.pop("fitted_on")
    print(json.dumps(law, indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
