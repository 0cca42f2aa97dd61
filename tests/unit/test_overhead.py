"""Interleaved overhead statistics on synthetic timings with a known overhead."""

from __future__ import annotations

import numpy as np
import pytest

from jouleprof.bench.overhead import (
    OverheadConfig,
    block_order,
    interleaved_overhead,
    overhead_from_blocks,
)


def _synthetic_runner(overhead: float, seed: int = 0, noise: float = 0.01, drift: float = 0.0005):
    """Steps of ~100 ms with 1% noise, a slow upward drift, and a switching cost."""
    rng = np.random.default_rng(seed)
    state = {"t": 0}

    def run_block(instrumented: bool, n_steps: int) -> list[float]:
        out = []
        for i in range(n_steps):
            base = 0.1 * (1 + drift * state["t"])  # the machine slowly gets slower
            t = base * (1 + overhead if instrumented else 1.0) * (1 + rng.normal(0, noise))
            if i == 0:
                t += 0.02  # the first step of a block pays for the switch
            out.append(t)
            state["t"] += 1
        return out

    return run_block


def test_recovers_a_known_three_percent_overhead():
    result = interleaved_overhead(_synthetic_runner(0.03), blocks=12, steps_per_block=20)
    assert result.ci_lo_pct <= 3.0 <= result.ci_hi_pct
    assert result.overhead_pct == pytest.approx(3.0, abs=1.0)
    assert result.ci_lo_pct > 0  # clearly more than nothing
    assert result.ci_hi_pct - result.ci_lo_pct < 3.0  # and reasonably tight
    assert result.n_pairs == 12 and result.steps_per_arm == 12 * 19
    assert sorted(result.order) == ["B"] * 12 + ["I"] * 12
    assert "overhead +" in str(result)
    assert result.to_json()["overhead_pct"] == result.overhead_pct


def test_no_overhead_gives_an_interval_around_zero():
    result = interleaved_overhead(_synthetic_runner(0.0, seed=3), blocks=12, steps_per_block=20)
    assert result.ci_lo_pct <= 0.0 <= result.ci_hi_pct


def test_interleaving_cancels_drift_that_fools_a_before_after_comparison():
    # All base blocks first, then all instrumented: the drift reads as overhead.
    run = _synthetic_runner(0.0, seed=1, drift=0.002)
    blocks = [(False, run(False, 20)) for _ in range(6)] + [(True, run(True, 20)) for _ in range(6)]
    naive = overhead_from_blocks(blocks, drop_first=1)
    assert naive.ci_lo_pct > 5  # far from the true 0%
    fair = interleaved_overhead(
        _synthetic_runner(0.0, seed=1, drift=0.002), blocks=6, steps_per_block=20
    )
    assert abs(fair.overhead_pct) < 1
    assert fair.ci_lo_pct <= 0.0 <= fair.ci_hi_pct


def test_block_order_is_paired_and_seeded():
    cfg = OverheadConfig(blocks=8, seed=5, order="random")
    order = block_order(cfg)
    assert len(order) == 16
    assert all(order[i] != order[i + 1] for i in range(0, 16, 2))
    assert order == block_order(cfg)
    assert block_order(OverheadConfig(blocks=3, order="alternate")) == [True, False] * 3
    assert block_order(OverheadConfig(blocks=2, order="random", seed=5)) == block_order(
        OverheadConfig(blocks=2, order="random", seed=5)
    )
    assert block_order(OverheadConfig(blocks=2)) == [True, False, False, True]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="both arms"):
        overhead_from_blocks([(True, [0.1, 0.1])])
    with pytest.raises(ValueError, match="unequal"):
        overhead_from_blocks([(True, [0.1]), (False, [0.1]), (True, [0.1])])
    with pytest.raises(ValueError, match="positive"):
        overhead_from_blocks([(True, [0.1]), (False, [-0.1])])
    with pytest.raises(ValueError, match="no steps after dropping"):
        overhead_from_blocks([(True, [0.1]), (False, [0.1])], drop_first=1)
    with pytest.raises(ValueError, match="order"):
        OverheadConfig(order="abba")
    with pytest.raises(ValueError, match="drop_first"):
        OverheadConfig(steps_per_block=2, drop_first=2)
    with pytest.raises(ValueError, match="returned 1 step times"):
        interleaved_overhead(lambda inst, n: [0.1], blocks=2, steps_per_block=3, warmup_blocks=0)


def test_the_median_pair_resists_pairs_hit_by_stalls_from_elsewhere():
    # One-step blocks of a 0.2 s step with 0.4 % of overhead, 2 % noise, and one pair in ten
    # whose instrumented step a stall elsewhere on the host lengthened by 40 %.
    rng = np.random.default_rng(7)
    blocks = []
    for k in range(200):
        base = 0.2 * (1 + rng.normal(0, 0.02))
        inst = 0.2 * 1.004 * (1 + rng.normal(0, 0.02)) * (1.4 if k % 10 == 0 else 1.0)
        blocks += [(True, [inst]), (False, [base])]
    r = overhead_from_blocks(blocks, seed=1)
    assert r.median_ci_lo_pct <= 0.4 <= r.median_ci_hi_pct
    assert r.median_ci_hi_pct - r.median_ci_lo_pct < r.ci_hi_pct - r.ci_lo_pct
    assert r.overhead_pct > 3.0  # the geometric mean carries the stalls
    assert abs(r.median_pct - 0.4) < abs(r.overhead_pct - 0.4)
    assert "median pair" in str(r)
