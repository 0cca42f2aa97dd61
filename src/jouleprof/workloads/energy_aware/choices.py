"""The choices an energy-aware cell (`cell.CellSpec`) and an energy-aware workload
(`workload.EnergyAwareConfig`) share, checked in one place: the architecture, the dataset, λ,
what E counts, its reduction and the precision."""

from __future__ import annotations

import math
from typing import Any

from jouleprof.energy_aware.regularizer import KINDS, REDUCTIONS
from jouleprof.workloads.energy_aware.datasets import DATASETS
from jouleprof.workloads.energy_aware.models import ARCHS

PRECISIONS = ("fp32", "bf16")


def check_choices(cfg: Any) -> None:
    """ValueError naming the first bad field of `cfg` (a CellSpec or an EnergyAwareConfig:
    anything with these six fields) and its valid values."""
    arch, dataset, lam = cfg.arch, cfg.dataset, cfg.lam
    kind, reduction, precision = cfg.kind, cfg.reduction, cfg.precision
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: choose one of {', '.join(ARCHS)}")
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}: choose one of {', '.join(DATASETS)}")
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam (λ) must be a finite number ≥ 0, got {lam}")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: choose one of {', '.join(KINDS)}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
