"""NetScore (Wong, 2019) and its deployment variants NS_E, NS_M and NS# (shared/FACTS.md).

All take accuracy A as top-1 in percent. NetScore weighs it against parameters P (millions) and
multiply-accumulates M (billions); the deployment variants, with weight w = 1/8, against timed
inference seconds t, average power watts p and peak memory MiB r:

    NetScore = 20·log10(A² / (P^0.5 · M^0.5))
    NS_E     = 20·log10(A² / (t^w · p^w))
    NS_M     = 20·log10(A² / r^w)
    NS#      = 20·log10(A² / (r^w · t^w · p^w))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEPLOYMENT_WEIGHT = 1.0 / 8.0


def _positive(name: str, value: float) -> float:
    if value is None or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _accuracy(accuracy_pct: float) -> float:
    a = _positive("accuracy (top-1, percent)", accuracy_pct)
    if a > 100:
        raise ValueError(f"accuracy is a percentage in (0, 100], got {accuracy_pct}")
    return a


def netscore(accuracy_pct: float, params_m: float, macs_g: float) -> float:
    a = _accuracy(accuracy_pct)
    p, m = _positive("params_m", params_m), _positive("macs_g", macs_g)
    return 20.0 * math.log10(a**2 / (p**0.5 * m**0.5))


def ns_e(accuracy_pct: float, time_s: float, power_w: float, w: float = DEPLOYMENT_WEIGHT) -> float:
    a = _accuracy(accuracy_pct)
    t, p = _positive("time_s", time_s), _positive("power_w", power_w)
    return 20.0 * math.log10(a**2 / (t**w * p**w))


def ns_m(accuracy_pct: float, memory_mib: float, w: float = DEPLOYMENT_WEIGHT) -> float:
    a = _accuracy(accuracy_pct)
    r = _positive("memory_mib", memory_mib)
    return 20.0 * math.log10(a**2 / r**w)


def ns_hash(
    accuracy_pct: float,
    memory_mib: float,
    time_s: float,
    power_w: float,
    w: float = DEPLOYMENT_WEIGHT,
) -> float:
    a = _accuracy(accuracy_pct)
    r, t = _positive("memory_mib", memory_mib), _positive("time_s", time_s)
    p = _positive("power_w", power_w)
    return 20.0 * math.log10(a**2 / (r**w * t**w * p**w))


@dataclass(frozen=True)
class NetScoreInputs:
    accuracy_pct: float
    params_m: float | None = None
    macs_g: float | None = None
    time_s: float | None = None
    power_w: float | None = None
    memory_mib: float | None = None


def scores(x: NetScoreInputs) -> dict[str, float]:
    """Every score whose inputs are given: keys netscore, ns_e, ns_m, ns_hash."""
    out: dict[str, float] = {}
    if x.params_m is not None or x.macs_g is not None:
        if x.params_m is None or x.macs_g is None:
            raise ValueError("NetScore needs both params_m and macs_g")
        out["netscore"] = netscore(x.accuracy_pct, x.params_m, x.macs_g)
    if x.time_s is not None or x.power_w is not None:
        if x.time_s is None or x.power_w is None:
            raise ValueError("NS_E needs both time_s and power_w")
        out["ns_e"] = ns_e(x.accuracy_pct, x.time_s, x.power_w)
    if x.memory_mib is not None:
        out["ns_m"] = ns_m(x.accuracy_pct, x.memory_mib)
    if x.memory_mib is not None and x.time_s is not None and x.power_w is not None:
        out["ns_hash"] = ns_hash(x.accuracy_pct, x.memory_mib, x.time_s, x.power_w)
    if not out:
        raise ValueError(
            "no score can be computed: give --params-m and --macs-g (NetScore), "
            "--time-s and --power-w (NS_E), --memory-mib (NS_M), or all of the last three (NS#)"
        )
    return out
