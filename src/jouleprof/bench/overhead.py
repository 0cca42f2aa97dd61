"""The recorder's overhead, measured side by side in one process.

Instrumented and uninstrumented blocks of steps alternate in pairs, so slow drifts (clocks
warming up, the GPU heating) hit both arms alike. Pairs run in a counterbalanced order by
default (IB BI IB BI ..., which cancels a linear drift exactly), in a seeded random order, or
strictly alternating. The overhead is the geometric mean over pairs of the ratio of the
instrumented block's median step time to its partner's, minus one; its confidence interval
comes from a bootstrap that resamples those pairs. Beside it, the median pair's ratio, with its
own bootstrap interval: robust to a few pairs hit by stalls from elsewhere. The median step
time of each arm (all its steps pooled) is reported too.

`overhead_from_blocks` is pure statistics on recorded step times (unit-tested with synthetic
timings); `interleaved_overhead` drives a runner that the workload supplies:
``run_block(instrumented, n_steps) -> list of step times in seconds``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

ORDERS = ("counterbalanced", "random", "alternate")


@dataclass(frozen=True)
class OverheadConfig:
    """How to interleave and how to summarize."""

    blocks: int = 10
    """Pairs of blocks (one instrumented, one not) measured."""
    steps_per_block: int = 20
    """Steps in each block."""
    drop_first: int = 1
    """Steps dropped from the start of each block (they carry the cost of switching)."""
    warmup_blocks: int = 1
    """Pairs run first and discarded."""
    order: str = "counterbalanced"
    """"counterbalanced": IB BI IB BI...; "random": each pair in a seeded random order;
    "alternate": IB IB IB..."""
    seed: int = 0
    """Seeds the pair order and the bootstrap."""
    n_boot: int = 2000
    """Bootstrap resamples for the confidence interval."""
    confidence: float = 0.95
    """Coverage of the confidence interval."""

    def __post_init__(self) -> None:
        if self.blocks < 2:
            raise ValueError(f"blocks must be ≥ 2 (pairs of blocks), got {self.blocks}")
        if self.steps_per_block < 1:
            raise ValueError(f"steps_per_block must be ≥ 1, got {self.steps_per_block}")
        if not 0 <= self.drop_first < self.steps_per_block:
            raise ValueError(
                f"drop_first must be in [0, steps_per_block), got {self.drop_first} "
                f"with steps_per_block={self.steps_per_block}"
            )
        if self.warmup_blocks < 0:
            raise ValueError(f"warmup_blocks must be ≥ 0, got {self.warmup_blocks}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.n_boot < 100:
            raise ValueError(f"n_boot must be ≥ 100, got {self.n_boot}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True)
class OverheadResult:
    """Median step times of both arms, the overhead in percent and its confidence interval."""

    base_step_s: float
    instrumented_step_s: float
    overhead_pct: float
    ci_lo_pct: float
    ci_hi_pct: float
    confidence: float
    n_pairs: int
    steps_per_arm: int
    block_medians_base_s: list[float] = field(default_factory=list)
    block_medians_instrumented_s: list[float] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    """The order blocks ran in: "I" instrumented, "B" base."""
    median_pct: float | None = None
    """The median pair's overhead (median of the pairs' log ratios): robust to the occasional
    pair that a stall elsewhere on the host hit. On the H200's host-paced V-JEPA2 step its
    interval was half as wide as the geometric mean's (benchmarks/results/attr_vith_b8, run3)."""
    median_ci_lo_pct: float | None = None
    median_ci_hi_pct: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        median = (
            ""
            if self.median_pct is None
            else f"; median pair {self.median_pct:+.2f}% "
            f"[{self.median_ci_lo_pct:+.2f}, {self.median_ci_hi_pct:+.2f}]"
        )
        return (
            f"overhead {self.overhead_pct:+.2f}% "
            f"[{self.ci_lo_pct:+.2f}, {self.ci_hi_pct:+.2f}] ({self.confidence:.0%} CI; "
            f"{self.instrumented_step_s * 1e3:.3f} vs {self.base_step_s * 1e3:.3f} ms/step, "
            f"{self.n_pairs} pairs{median})"
        )


def _check_block(times: Sequence[float], i: int) -> np.ndarray:
    a = np.asarray(times, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"block {i} holds no step times")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"block {i} holds a step time that is not a positive number")
    return a


def overhead_from_blocks(
    blocks: Sequence[tuple[bool, Sequence[float]]],
    *,
    drop_first: int = 0,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> OverheadResult:
    """Overhead of instrumentation from interleaved blocks of step times.

    Args:
        blocks: (instrumented, step times in seconds) in the order they ran. The k-th
            instrumented block is paired with the k-th base block (run them next to each other).
        drop_first: steps dropped from the start of every block.
        n_boot: bootstrap resamples (of pairs of blocks).
        confidence: coverage of the interval.
        seed: seeds the bootstrap.

    Raises:
        ValueError: an arm with no blocks, unequal numbers of blocks, or bad step times.
    """
    inst, base, order = [], [], []
    for i, (instrumented, times) in enumerate(blocks):
        a = _check_block(times, i)[drop_first:]
        if a.size == 0:
            raise ValueError(f"block {i} holds no steps after dropping the first {drop_first}")
        (inst if instrumented else base).append(a)
        order.append("I" if instrumented else "B")
    if not inst or not base:
        raise ValueError("need blocks of both arms (instrumented and not) to compare")
    if len(inst) != len(base):
        raise ValueError(
            f"unequal arms: {len(inst)} instrumented and {len(base)} base blocks; "
            "interleave them in pairs"
        )
    n = len(inst)
    # Each pair ran back to back: its ratio is free of drifts slower than a pair.
    log_ratios = np.log([np.median(i) / np.median(b) for i, b in zip(inst, base, strict=True)])
    point = float(np.expm1(log_ratios.mean()))
    rng = np.random.default_rng(seed)
    resampled = log_ratios[rng.integers(0, n, (n_boot, n))]
    boots = np.expm1(resampled.mean(axis=1))
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(boots, [alpha, 1.0 - alpha])
    m_lo, m_hi = np.quantile(np.expm1(np.median(resampled, axis=1)), [alpha, 1.0 - alpha])
    return OverheadResult(
        base_step_s=float(np.median(np.concatenate(base))),
        instrumented_step_s=float(np.median(np.concatenate(inst))),
        overhead_pct=float(point * 100),
        ci_lo_pct=float(lo * 100),
        ci_hi_pct=float(hi * 100),
        confidence=confidence,
        n_pairs=n,
        steps_per_arm=int(sum(a.size for a in inst)),
        block_medians_base_s=[float(np.median(a)) for a in base],
        block_medians_instrumented_s=[float(np.median(a)) for a in inst],
        order=order,
        median_pct=float(np.expm1(np.median(log_ratios)) * 100),
        median_ci_lo_pct=float(m_lo * 100),
        median_ci_hi_pct=float(m_hi * 100),
    )


def block_order(config: OverheadConfig) -> list[bool]:
    """Which arm each measured block runs (True: instrumented), pair by pair."""
    rng = random.Random(config.seed)
    out: list[bool] = []
    for k in range(config.blocks):
        if config.order == "alternate":
            first = True
        elif config.order == "counterbalanced":
            first = k % 2 == 0
        else:
            first = rng.random() < 0.5
        out += [first, not first]
    return out


def interleaved_overhead(
    run_block: Callable[[bool, int], Sequence[float]],
    config: OverheadConfig | None = None,
    **overrides: Any,
) -> OverheadResult:
    """Run interleaved blocks through `run_block` and measure the overhead.

    Args:
        run_block: runs `n_steps` steps, instrumented or not, and returns each step's time
            in seconds (measured as the workload sees fit, e.g. synchronized at the block's
            edges and divided, or per step with CUDA events).
        config: an OverheadConfig; keyword overrides (blocks=..., steps_per_block=...)
            replace its fields.
    """
    cfg = config or OverheadConfig()
    if overrides:
        cfg = OverheadConfig(**{**asdict(cfg), **overrides})
    for _ in range(cfg.warmup_blocks):
        run_block(False, cfg.steps_per_block)
        run_block(True, cfg.steps_per_block)
    blocks = []
    for instrumented in block_order(cfg):
        times = list(run_block(instrumented, cfg.steps_per_block))
        if len(times) != cfg.steps_per_block:
            raise ValueError(
                f"run_block returned {len(times)} step times for {cfg.steps_per_block} steps"
            )
        blocks.append((instrumented, times))
    result = overhead_from_blocks(
        blocks,
        drop_first=cfg.drop_first,
        n_boot=cfg.n_boot,
        confidence=cfg.confidence,
        seed=cfg.seed,
    )
    log.info("%s", result)
    return result
