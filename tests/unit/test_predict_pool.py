"""A configuration measured in several windows is one row of the dataset: geometric means of its
J per pass and s per pass, each window weighing the same."""

import math

import pandas as pd
import pytest

from jouleprof.predict.dataset import configurations


def _window(spec, batch, passes, j_per_pass, s_per_pass, protocol="short"):
    return {"family": "f", "spec": spec, "precision": "bf16", "batch": batch, "passes": passes,
            "energy_j": passes * j_per_pass, "s_per_pass": s_per_pass,
            "mean_power_w": j_per_pass / s_per_pass, "protocol": protocol,
            "status": "ok"}  # fmt: skip


def test_windows_of_one_configuration_pool_to_their_geometric_mean():
    rows = pd.DataFrame(
        [
            _window("a", 1, 100, 1.0, 0.010),
            _window("a", 1, 1000, 4.0, 0.020, "full"),  # 10x the passes, the same weight
            _window("b", 64, 50, 2.0, 0.004),
        ]
    )
    c = configurations(rows).set_index("spec")
    a, b = c.loc["a"], c.loc["b"]
    assert a["windows"] == 2 and b["windows"] == 1
    assert a["energy_j"] / a["passes"] == pytest.approx(2.0)  # sqrt(1 * 4), not pass-weighted
    assert a["s_per_pass"] == pytest.approx(math.sqrt(0.010 * 0.020))
    assert a["mean_power_w"] == pytest.approx(2.0 / math.sqrt(0.010 * 0.020))
    assert a["j_window_sd_pct"] == pytest.approx(100 * math.log(4) / math.sqrt(2))
    assert a["protocol"] == "pooled" and b["protocol"] == "short"
    # a configuration with one window is that window, unchanged
    assert b["energy_j"] == pytest.approx(100.0) and b["s_per_pass"] == pytest.approx(0.004)
    assert math.isnan(b["j_window_sd_pct"])


def test_other_precisions_and_batches_are_other_configurations():
    rows = pd.DataFrame([_window("a", 1, 10, 1.0, 0.01), _window("a", 2, 10, 3.0, 0.01)])
    assert len(configurations(rows)) == 2
