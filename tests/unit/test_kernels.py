"""Instant-field kernels: specs, their boxes, and `jouleprof attribute --instant-kernel`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from jouleprof.attribution.kernels import BOXCAR, parse_kernel
from jouleprof.attribution.regression import check_kernel
from jouleprof.cli.main import app
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training


@pytest.mark.parametrize(
    ("spec", "window_s", "n_boxes"),
    [("box:25", 0.025, 1), ("exp:20", 0.1, 10), ("tri:60", 0.06, 6)],
)
def test_specs_give_a_window_and_boxes_that_sum_to_one(spec, window_s, n_boxes):
    window, boxes = parse_kernel(spec)
    assert window == pytest.approx(window_s) and len(boxes) == n_boxes
    check_kernel(boxes)  # what the regression accepts
    assert boxes[0][1] == 0.0  # every kernel starts at the refresh


def test_shapes_weigh_the_refresh_most():
    _, exp = parse_kernel("exp:20")
    _, tri = parse_kernel("tri:60")
    for boxes in (exp, tri):
        weights = [w for _, _, w in boxes]
        assert weights == sorted(weights, reverse=True)
    assert parse_kernel("box:37")[1] == BOXCAR


@pytest.mark.parametrize("spec", ["gauss:20", "exp", "box:-5", "tri:abc", "exp:inf"])
def test_bad_specs_say_what_is_understood(spec):
    with pytest.raises(ValueError, match="box:MS"):
        parse_kernel(spec)


def _sim_run(tmp_path):
    run = simulate_training(
        [PhaseSpec("busy", 0.035, 650.0), PhaseSpec("rest", 0.05, 90.0)], 150, seed=3
    )
    run.samples_frame().to_csv(tmp_path / "samples.csv", index=False)
    run.spans_frame().to_csv(tmp_path / "spans.csv", index=False)
    return tmp_path


def test_attribute_takes_a_kernel_and_refuses_a_bad_one(tmp_path):
    rd = _sim_run(tmp_path)
    runner = CliRunner()
    bad = runner.invoke(app, ["attribute", str(rd), "--instant-kernel", "gauss:20"])
    assert bad.exit_code == 2 and "box:MS" in bad.output
    ok = runner.invoke(app, ["attribute", str(rd), "--instant-kernel", "tri:60", "--json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    diag = doc["devices"][0]["diagnostics"]
    assert len(diag["instant_kernel"]) == 6 and diag["instant_window_s"] == pytest.approx(0.06)
