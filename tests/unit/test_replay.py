"""ReplaySensor: a samples.csv played back on a ManualClock."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from jouleprof.clock import ManualClock
from jouleprof.errors import RunDirError, SensorError
from jouleprof.sensors.base import Sensor
from jouleprof.sensors.replay import ReplaySensor
from jouleprof.types import SAMPLE_COLUMNS, Reading, Sample


def write_samples(path: Path, samples: list[Sample]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SAMPLE_COLUMNS)
        for s in samples:
            w.writerow("" if v is None else v for v in s.row())
    return path


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    g = "gpu0"
    return write_samples(
        tmp_path / "samples.csv",
        [
            Sample(0.0, g, 100.0, 101.0, 1000.0, 5.0, 2**33, 1980.0, 40.0),
            Sample(0.0, "cpu-package-0", energy_j=50.0),
            Sample(0.1, g, 200.0, 250.0, None, 90.0, 2**34, 1980.0, 41.0),
            Sample(0.2, g, 300.0, None, None, 95.0, 2**34, 1755.0, None),
            Sample(0.3, g, 310.0, 320.0, 1060.0, 99.0, 2**34, 1755.0, 42.0),
            Sample(0.3, "cpu-package-0", energy_j=80.0),
        ],
    )


def test_round_trip_values(recording: Path) -> None:
    clock = ManualClock()
    sensor = ReplaySensor(recording, clock)
    assert isinstance(sensor, Sensor)
    assert sensor.kind == "replay"
    assert sensor.devices == ("gpu0", "cpu-package-0")
    assert sensor.read("gpu0", counter=True) == Reading(
        100.0, 101.0, 1000.0, 5.0, 2**33, 1980.0, 40.0
    )
    clock.advance_s(0.15)
    r = sensor.read("gpu0", counter=False)
    assert r.power_w == 200.0 and r.power_instant_w == 250.0 and r.energy_j is None
    assert r.mem_used_bytes == 2**34 and isinstance(r.mem_used_bytes, int)
    # The last recorded counter value, not the empty cell of the latest row.
    assert sensor.read("gpu0", counter=True).energy_j == 1000.0


def test_empty_cells_fall_back_to_the_last_recorded_value(recording: Path) -> None:
    clock = ManualClock(0.2)
    sensor = ReplaySensor(recording, clock)
    r = sensor.read("gpu0", counter=True)
    assert r.power_w == 300.0
    assert r.power_instant_w == 250.0  # empty at 0.2 s: the 0.1 s value holds
    assert r.temp_c == 41.0
    assert r.energy_j == 1000.0
    clock.advance_s(0.1)
    assert sensor.read("gpu0", counter=True).energy_j == 1060.0


def test_never_recorded_is_none_not_zero(recording: Path) -> None:
    clock = ManualClock(1.0)
    sensor = ReplaySensor(recording, clock)
    r = sensor.read("cpu-package-0", counter=True)
    assert r.energy_j == 80.0
    assert r.power_w is None and r.util_pct is None and r.mem_used_bytes is None
    infos = {(i.device, i.signal): i for i in sensor.signals()}
    assert infos[("cpu-package-0", "energy_j")].available
    assert not infos[("cpu-package-0", "power_w")].available
    assert "never recorded" in infos[("cpu-package-0", "power_w")].reason


def test_before_the_first_sample_reads_nothing(recording: Path) -> None:
    sensor = ReplaySensor(recording, ManualClock(-1.0))
    assert sensor.read("gpu0", counter=True) == Reading()


def test_max_age(recording: Path) -> None:
    clock = ManualClock(0.3)
    sensor = ReplaySensor(recording, clock, max_age_s=0.5)
    assert sensor.read("gpu0", counter=True).energy_j == 1060.0
    clock.advance_s(1.0)
    assert sensor.read("gpu0", counter=True) == Reading()


def test_frame_input_unsorted_and_extra_columns() -> None:
    frame = pd.DataFrame(
        {
            "t_s": [0.2, 0.0],
            "device": ["0", "0"],
            "power_w": [20.0, 10.0],
            "extra": ["x", "y"],
        }
    )
    clock = ManualClock(0.1)
    sensor = ReplaySensor(frame, clock, counter_read_is_slow=True, nominal_refresh_s=0.1)
    assert sensor.devices == ("0",)
    assert sensor.counter_read_is_slow and sensor.nominal_refresh_s == 0.1
    assert sensor.read("0", counter=True) == Reading(power_w=10.0)
    assert frame["t_s"].tolist() == [0.2, 0.0]  # the caller's frame is left alone


def test_errors(tmp_path: Path, recording: Path) -> None:
    with pytest.raises(RunDirError, match="no samples file"):
        ReplaySensor(tmp_path / "missing.csv", ManualClock())
    bad = tmp_path / "bad.csv"
    bad.write_text("time,dev\n0,gpu0\n")
    with pytest.raises(RunDirError, match="t_s"):
        ReplaySensor(bad, ManualClock())
    with pytest.raises(SensorError, match="unknown device"):
        ReplaySensor(recording, ManualClock()).read("gpu7", counter=False)
