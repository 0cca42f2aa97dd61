"""NetScore and its deployment variants with the intervals their inputs carry.

Every score is monotone in each input (up with accuracy; down with parameters, MACs, time, power
and memory), so the scores over a box of inputs are bounded by two corners of the box: the lower
bound takes the least accuracy with the largest costs, the upper bound the opposite. That bound is
exact for independent intervals and never narrower than the truth.

Two intervals are given for each score:

- ``lo``/``hi``: from the measurement's intervals alone (time, power, memory), accuracy fixed:
  what the meter can tell apart on this validation set;
- ``lo_acc``/``hi_acc``: also over the accuracy's sampling interval (Wilson, 95 %, from the number
  of clips it was computed on): what another draw of equally many clips could give.

Pure functions of recorded figures; no hardware.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jouleprof.scores import netscore as ns
from jouleprof.types import Figure, Source

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class Bounded:
    """A positive input with its interval and where it came from."""

    value: float
    lo: float
    hi: float
    source: str = "measured"
    """measured, estimated, simulated, ..."""

    def __post_init__(self) -> None:
        for name in ("value", "lo", "hi"):
            v = getattr(self, name)
            if v is None or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not self.lo <= self.value <= self.hi:
            raise ValueError(
                f"interval [{self.lo}, {self.hi}] does not hold the value {self.value}"
            )

    @classmethod
    def exact(cls, value: float, source: str = "measured") -> Bounded:
        return cls(float(value), float(value), float(value), source)

    @classmethod
    def of(cls, x: Figure | Bounded | float, name: str) -> Bounded:
        """From a Figure (its lo/hi where given, else exact), a Bounded, or a number (exact)."""
        if isinstance(x, Bounded):
            return x
        if isinstance(x, Figure):
            if x.value is None:
                raise ValueError(f"{name} is unavailable: {x.reason}")
            lo = x.lo if x.lo is not None else x.value
            hi = x.hi if x.hi is not None else x.value
            src = x.source.value
            if x.source is Source.ESTIMATED and x.reason and "simulat" in x.reason:
                src = "simulated"
            return cls(float(x.value), min(float(lo), x.value), max(float(hi), x.value), src)
        return cls.exact(float(x))


def wilson_pct(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion correct/n, in percent."""
    if n <= 0 or not 0 <= correct <= n:
        raise ValueError(f"need 0 ≤ correct ≤ n and n > 0, got {correct}/{n}")
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return 100 * max(centre - half, 0.0), 100 * min(centre + half, 1.0)


def monotone_interval(
    fn: Callable[..., float],
    args: Mapping[str, Bounded],
    decreasing: set[str],
) -> tuple[float, float, float]:
    """(value, lo, hi) of fn(**args) for fn increasing in every argument but `decreasing`."""
    value = fn(**{k: a.value for k, a in args.items()})
    low = fn(**{k: (a.hi if k in decreasing else a.lo) for k, a in args.items()})
    high = fn(**{k: (a.lo if k in decreasing else a.hi) for k, a in args.items()})
    return value, low, high


def _sources(inputs: Mapping[str, Bounded]) -> str:
    kinds = {b.source for b in inputs.values()}
    for k in ("simulated", "estimated"):
        if k in kinds:
            return k
    return "measured"


_SCORES: dict[str, tuple[Callable[..., float], tuple[str, ...]]] = {
    "netscore": (lambda a, p, m: ns.netscore(a, p, m), ("params_m", "macs_g")),
    "ns_e": (lambda a, t, p: ns.ns_e(a, t, p), ("time_s", "power_w")),
    "ns_m": (lambda a, r: ns.ns_m(a, r), ("memory_mib",)),
    "ns_hash": (lambda a, r, t, p: ns.ns_hash(a, r, t, p), ("memory_mib", "time_s", "power_w")),
}


def score_with_intervals(
    name: str,
    accuracy_pct: float,
    n_eval: int | None,
    inputs: Mapping[str, Figure | Bounded | float | None],
) -> dict[str, Any]:
    """One score (netscore, ns_e, ns_m, ns_hash) with both intervals, as a JSON-able dict.

    Keys: value, lo, hi (measurement only), lo_acc, hi_acc (with accuracy sampling; absent
    without n_eval), source (the weakest of its inputs'), inputs (each as value/lo/hi/source).
    A score whose inputs are missing or not positive is {"value": None, "reason": ...}.
    """
    if name not in _SCORES:
        raise ValueError(f"unknown score {name!r}: choose one of {', '.join(_SCORES)}")
    fn, needs = _SCORES[name]
    try:
        got = {}
        for k in needs:
            v = inputs.get(k)
            if v is None:
                raise ValueError(f"{k} is not given")
            got[k] = Bounded.of(v, k)
            if got[k].lo <= 0:
                raise ValueError(f"{k} must be positive, its interval reaches {got[k].lo}")
        if not 0 < accuracy_pct <= 100:
            raise ValueError(f"accuracy {accuracy_pct} % is not in (0, 100]")
    except ValueError as e:
        return {"value": None, "reason": str(e)}
    order = ("accuracy", *needs)

    def f(**kw):
        return fn(*(kw[k] for k in order))

    acc = Bounded.exact(accuracy_pct)
    value, lo, hi = monotone_interval(f, {"accuracy": acc, **got}, set(needs))
    out: dict[str, Any] = {"value": value, "lo": lo, "hi": hi, "source": _sources(got)}
    if n_eval:
        correct = round(accuracy_pct / 100 * n_eval)
        a_lo, a_hi = wilson_pct(correct, n_eval)
        if a_lo > 0:
            acc_b = Bounded(accuracy_pct, min(a_lo, accuracy_pct), max(a_hi, accuracy_pct))
            _, out["lo_acc"], out["hi_acc"] = monotone_interval(
                f, {"accuracy": acc_b, **got}, set(needs)
            )
            out["accuracy_interval_pct"] = [a_lo, a_hi]
        else:
            out["lo_acc"] = None
            out["reason_acc"] = "the accuracy's lower bound is 0: the score is unbounded below"
    out["inputs"] = {
        "accuracy_pct": accuracy_pct,
        "n_eval": n_eval,
        **{
            k: {"value": b.value, "lo": b.lo, "hi": b.hi, "source": b.source}
            for k, b in got.items()
        },
    }
    return out


def all_scores(
    accuracy_pct: float | None,
    n_eval: int | None,
    inputs: Mapping[str, Figure | Bounded | float | None],
) -> dict[str, dict[str, Any]]:
    """Every score of `_SCORES` (each as `score_with_intervals` gives it)."""
    if accuracy_pct is None:
        return {k: {"value": None, "reason": "no accuracy"} for k in _SCORES}
    return {k: score_with_intervals(k, accuracy_pct, n_eval, inputs) for k in _SCORES}


def as_figure(score: Mapping[str, Any]) -> Figure:
    """A score dict as a summary Figure (measurement interval; unavailable with its reason)."""
    if score.get("value") is None:
        return Figure.unavailable("score", score.get("reason") or "not computed")
    if score.get("source") == "measured":
        return Figure.measured(score["value"], "score", lo=score["lo"], hi=score["hi"])
    return Figure.estimated(
        score["value"],
        "score",
        f"from {score.get('source')} inputs",
        lo=score["lo"],
        hi=score["hi"],
    )


def overlap(a: Mapping[str, Any], b: Mapping[str, Any], lo: str = "lo", hi: str = "hi") -> bool:
    """Whether two scores' intervals overlap (their difference is inside the uncertainty)."""
    if a.get(lo) is None or b.get(lo) is None:
        return False
    return a[lo] <= b[hi] and b[lo] <= a[hi]
