"""Averaging kernels of the instant power field, as the regression takes them.

A kernel weighs the power before a refresh. It is written as boxes (start, end, weight) in
units of its window: each box spans from start × window to end × window before the refresh,
and the weights sum to 1 (`RegressionConfig.instant_kernel`). The regression fits the window's
length around its prior; the shape stays as given.

Specs, as `jouleprof attribute --instant-kernel` takes them:

    box:25        a boxcar of 25 ms (the published prior)
    exp:20        an exponential of time constant 20 ms (window 5 τ, 10 boxes)
    tri:60        a triangle 60 ms long, heaviest at the refresh (6 boxes)

On the H200 the V-JEPA2 runs could not tell box:37, exp:20 and tri:60 apart, and the split of
two short neighbouring phases depended on which (benchmarks/results/attr_vith_b8);
benchmarks/kernel_probe.py measures the kernel.

The energy counter needs no window, but the energy it books over an interval may trail the
work: `counter_delays` writes such a response (a lag, and an exponential tail holding part of
the energy) as point delays for the regression's counter rows (`RegressionConfig.counter_tail_s`).
"""

from __future__ import annotations

import numpy as np

Boxes = tuple[tuple[float, float, float], ...]
Delays = tuple[tuple[float, float], ...]
"""Point delays (delay_s, weight), weights summing to 1: a response to a unit of energy."""

BOXCAR: Boxes = ((1.0, 0.0, 1.0),)


def exponential(n_boxes: int = 10, span_tau: float = 5.0) -> Boxes:
    """exp(−t/τ) before the refresh, cut at span_tau × τ (the window), in n_boxes boxes."""
    edges = np.linspace(0.0, span_tau, n_boxes + 1)
    w = np.exp(-edges[:-1]) - np.exp(-edges[1:])
    w = w / w.sum()
    return tuple(
        (float(b / span_tau), float(a / span_tau), float(x))
        for a, b, x in zip(edges[:-1], edges[1:], w, strict=True)
    )


def triangle(n_boxes: int = 6) -> Boxes:
    """Weight falling linearly from the refresh to zero at the window's start."""
    edges = np.linspace(0.0, 1.0, n_boxes + 1)
    w = 1.0 - 0.5 * (edges[:-1] + edges[1:])
    w = w / w.sum()
    return tuple(
        (float(b), float(a), float(x)) for a, b, x in zip(edges[:-1], edges[1:], w, strict=True)
    )


def parse_kernel(spec: str) -> tuple[float, Boxes]:
    """(window in seconds, boxes) of a spec such as "box:25", "exp:20" or "tri:60" (ms).

    Raises:
        ValueError: the spec is not SHAPE:MILLISECONDS with a known shape and a time > 0.
    """
    shape, _, ms = spec.partition(":")
    try:
        t_ms = float(ms)
    except ValueError:
        t_ms = float("nan")
    if shape not in ("box", "exp", "tri") or not t_ms > 0 or not np.isfinite(t_ms):
        raise ValueError(
            f"instant kernel {spec!r} not understood: give box:MS, exp:MS (time constant) or "
            "tri:MS, e.g. box:25, exp:20, tri:60"
        )
    if shape == "box":
        return t_ms / 1e3, BOXCAR
    if shape == "exp":
        return 5.0 * t_ms / 1e3, exponential()
    return t_ms / 1e3, triangle()


def counter_delays(tail_s: float, fraction: float = 1.0, lag_s: float = 0.0, n: int = 16) -> Delays:
    """The energy counter's response to energy drawn at t, as point delays (delay_s, weight).

    A share 1 − `fraction` is booked at t + `lag_s`; the rest trails it as an exponential of
    time constant `tail_s`, cut into `n` boxes of equal weight, each at its conditional mean
    (so the mean delay, lag + fraction × tail, is exact). No tail and no lag: ((0.0, 1.0),),
    which the regression treats as no kernel at all.

    A negative lag (the counter books energy before the recorded edges) is not physical for
    the board, but is what recorded edges that run late relative to the sensor's clock look
    like; scans take it.

    Raises:
        ValueError: tail_s < 0, fraction outside [0, 1], lag_s not finite, or n < 1.
    """
    if not tail_s >= 0 or not 0 <= fraction <= 1 or not np.isfinite(lag_s) or n < 1:
        raise ValueError(
            f"counter kernel needs tail_s ≥ 0, 0 ≤ fraction ≤ 1, a finite lag_s and n ≥ 1; got "
            f"tail_s={tail_s}, fraction={fraction}, lag_s={lag_s}, n={n}"
        )
    if tail_s == 0 or fraction == 0:
        return ((float(lag_s), 1.0),)
    q = np.arange(n + 1) / n
    edges = -np.log1p(-q[:-1])  # box starts, in units of tail_s (the last box runs to ∞)
    ea = np.exp(-edges)
    eb = np.append(ea[1:], 0.0)
    ends = np.append(edges[1:], 0.0)
    # E[x | a < x < b] for x ~ Exp(1): 1 + (a e^-a − b e^-b) / (e^-a − e^-b).
    mean = 1.0 + (edges * ea - np.where(eb > 0, ends * eb, 0.0)) / (ea - eb)
    out = [(float(lag_s + tail_s * m), float(fraction / n)) for m in mean]
    if fraction < 1:
        out.insert(0, (float(lag_s), float(1.0 - fraction)))
    return tuple(out)
