"""The GPU's slow fields: when they are read, the period's validation and its plumbing from
`jouleprof measure --slow-fields-ms` and MeasureConfig down to the NVML sensor (no test here
touches pynvml: the sensor is replaced above it, or stopped before NVML is opened)."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jouleprof.bench.modes import Mode
from jouleprof.errors import SensorUnavailable
from jouleprof.measurement import MeasureConfig, measure
from jouleprof.sensors import nvml
from jouleprof.sensors.discover import open_sensors
from jouleprof.sensors.nvml import (
    NOMINAL_REFRESH_S,
    SLOW_FIELDS_PERIOD_S,
    NvmlSensor,
    check_slow_period,
    slow_fields_due,
)

INF = float("inf")


def poll_reads(interval_s, period_s, seconds=120.0, dither=0.25, seed=1, counter_every=None):
    """The times a sensor polled at dithered `interval_s` reads its slow fields."""
    rng = random.Random(seed)
    t, due, last, reads, next_counter = 0.0, -INF, -INF, [], 0.0
    while t < seconds:
        counter = counter_every is not None and t >= next_counter
        if counter:
            next_counter = t + counter_every
        read, due = slow_fields_due(t, due, last, period_s, counter)
        if read:
            reads.append(t)
            last = t
        t += interval_s * rng.uniform(1 - dither, 1 + dither)
    return reads


def mean_gap(reads):
    return (reads[-1] - reads[0]) / (len(reads) - 1)


def test_first_poll_reads_and_starts_the_grid():
    assert slow_fields_due(3.0, -INF, -INF, 0.5) == (True, 3.5)
    assert slow_fields_due(3.2, 3.5, 3.0, 0.5) == (False, 3.5)
    assert slow_fields_due(3.51, 3.5, 3.0, 0.5) == pytest.approx((True, 4.0))


def test_one_read_per_slot_at_fast_polls():
    for interval_s, period_s in ((0.02, 0.5), (0.005, 0.5), (0.02, 0.1)):
        reads = poll_reads(interval_s, period_s)
        assert mean_gap(reads) == pytest.approx(period_s, rel=0.01)
        gaps = [b - a for a, b in zip(reads, reads[1:], strict=False)]
        assert max(gaps) <= period_s + 1.3 * interval_s


def test_polls_at_about_the_period_read_at_almost_every_poll():
    # The e2e mode polls every 0.5 s ± 25 % with the 0.5 s default: timed from the last read,
    # the fields would be read about every 0.75 s; on the grid, about every 0.53 s.
    assert mean_gap(poll_reads(0.5, 0.5, seconds=600)) < 0.56


def test_a_starved_sampler_skips_missed_slots_and_keeps_the_phase():
    read, due = slow_fields_due(10.26, 9.0, 8.5, 0.5)
    assert read and due == pytest.approx(10.5)  # slots 9.0, 9.5, 10.0 collapse into one read


def test_counter_reads_bring_stale_fields_without_using_a_slot():
    # A poll that reads the energy counter also reads fields older than a refresh period ...
    assert slow_fields_due(3.2, 3.5, 3.0, 0.5, counter=True) == (True, 3.5)
    # ... but not fresher ones, nor without the counter.
    fresh = 3.0 + 0.5 * NOMINAL_REFRESH_S
    assert slow_fields_due(fresh, 3.5, 3.0, 0.5, counter=True) == (False, 3.5)
    assert slow_fields_due(3.2, 3.5, 3.0, 0.5, counter=False) == (False, 3.5)
    # A run's edges (the counter read every refresh) have the fields about every refresh.
    reads = poll_reads(0.02, 0.5, seconds=5, counter_every=NOMINAL_REFRESH_S)
    assert mean_gap(reads) < 1.3 * NOMINAL_REFRESH_S


def test_sensor_default_and_period_validation():
    assert SLOW_FIELDS_PERIOD_S == 0.1
    assert check_slow_period(0.5) == 0.5 and check_slow_period(1) == 1.0
    for bad in (0, -0.5, math.nan, INF):
        with pytest.raises(ValueError, match="slow-field period must be .* > 0"):
            check_slow_period(bad)


def test_nvml_sensor_rejects_a_bad_period_before_opening_nvml():
    with pytest.raises(ValueError, match=r"slow-field period .* \(got 0\)"):
        NvmlSensor([0], slow_period_s=0)


def test_open_sensors_checks_and_passes_the_period(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="slow-field period"):
        open_sensors(None, rapl=False, gpu_slow_period_s=-1.0)
    seen = []

    class NoGpu:  # stands in for NvmlSensor: records its arguments, finds no GPU
        def __init__(self, gpus, environ=None, **kw):
            seen.append(kw)
            raise SensorUnavailable("no NVIDIA GPU here (test)")

    monkeypatch.setattr(nvml, "NvmlSensor", NoGpu)
    with open_sensors(None, rapl=False, gpu_slow_period_s=0.5) as found:
        assert found.sensors == [] and "no NVIDIA GPU here" in found.notes[0]
    with open_sensors(None, rapl=False):
        pass
    assert seen == [{"slow_period_s": 0.5}, {}]


def test_measure_config_field():
    assert MeasureConfig().slow_fields_period_s == 0.5
    assert MeasureConfig(slow_fields_period_s=0.1).slow_fields_period_s == 0.1
    for bad in (0.0, -0.1, math.nan, INF):
        with pytest.raises(ValueError, match=r"slow_fields_period_s must be .* > 0"):
            MeasureConfig(slow_fields_period_s=bad)


def test_modes_choose_their_period():
    # Fine mode keeps the refresh period (its regression can use the average-power rows).
    assert Mode.FINE.measure_config((0,)).slow_fields_period_s == 0.1
    assert Mode.E2E.measure_config((0,)).slow_fields_period_s == MeasureConfig.slow_fields_period_s


def test_measure_passes_the_period_on_and_records_it(monkeypatch, tmp_path):
    from jouleprof.sensors import discover

    calls = []
    real = discover.open_sensors

    def spy(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(discover, "open_sensors", spy)
    cfg = MeasureConfig(gpus=(), rapl=False, idle_s=0.0, slow_fields_period_s=0.25)
    with measure(tmp_path / "run", cfg, simulate_gpu_w=100.0):
        pass
    assert calls[0]["gpu_slow_period_s"] == 0.25
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert rec["config"]["measure"]["slow_fields_period_s"] == 0.25


def run_cli(tmp_path: Path, *flags: str):
    from jouleprof.cli.main import app

    args = ["measure", "--out", str(tmp_path / "run"), "--gpus", "none", "--no-rapl"]
    args += ["--idle-s", "0", "--simulate-gpu-w", "100", *flags, "--", sys.executable, "-c", ""]
    return CliRunner().invoke(app, args)


def test_cli_flag_reaches_run_json(tmp_path):
    r = run_cli(tmp_path / "a", "--slow-fields-ms", "250")
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "a" / "run" / "run.json").read_text())
    assert rec["config"]["measure"]["slow_fields_period_s"] == 0.25
    r = run_cli(tmp_path / "b")
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "b" / "run" / "run.json").read_text())
    assert rec["config"]["measure"]["slow_fields_period_s"] == 0.5


@pytest.mark.parametrize("value", ["0", "-100"])
def test_cli_rejects_a_period_not_above_zero(tmp_path, value):
    r = run_cli(tmp_path, f"--slow-fields-ms={value}")
    assert r.exit_code == 2
    assert "--slow-fields-ms must be > 0" in r.output
    assert not (tmp_path / "run").exists()
