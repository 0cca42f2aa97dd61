"""benchmarks/overhead_pool.py: overhead pairs of repeated runs pooled."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _run(d, inst, base):
    d.mkdir()
    ov = {"block_medians_instrumented_s": inst, "block_medians_base_s": base}
    (d / "run.json").write_text(json.dumps({"extra": {"overhead": ov}}))
    return d


def test_pooled_pairs_narrow_the_interval_and_keep_the_ratio(tmp_path, load_benchmark):
    pool = load_benchmark("overhead_pool")
    rng = np.random.default_rng(3)
    runs = []
    for i in range(4):
        base = 0.2 * np.exp(rng.normal(0, 0.01, 150))
        inst = base * 1.003 * np.exp(rng.normal(0, 0.01, 150))  # +0.3 %, 1 % noise a pair
        runs.append(_run(tmp_path / f"r{i}", inst.tolist(), base.tolist()))
    per_run = [pool.pair_log_ratios(r) for r in runs]
    one = pool.pool_pairs(per_run[:1])
    four = pool.pool_pairs(per_run)
    assert four["n_pairs"] == 600 and four["n_runs"] == 4
    width = lambda r: r["mean_ci_pct"][1] - r["mean_ci_pct"][0]  # noqa: E731
    assert width(four) < 0.6 * width(one)  # ~1/√4 of one run's
    assert four["mean_ci_pct"][0] < 0.3 < four["mean_ci_pct"][1]
    assert four["median_ci_pct"][0] < 0.3 < four["median_ci_pct"][1]
    assert abs(four["mean_pct"] - 0.3) < 0.2


def test_a_run_without_pairs_is_named(tmp_path, load_benchmark):
    pool = load_benchmark("overhead_pool")
    d = tmp_path / "empty"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"extra": {}}))
    with pytest.raises(SystemExit, match="no overhead pairs"):
        pool.pair_log_ratios(d)
    bad = _run(tmp_path / "bad", [0.2, 0.2], [0.2])
    with pytest.raises(SystemExit, match="unequal"):
        pool.pair_log_ratios(bad)
