"""`jouleprof.profile(..., sensor=FILE)`: the sensor file is read before the run, and the
regression on exit takes its power-buffer lag where the run measured the same GPU model (on a
committed H100 run, through the profile's own exit path)."""

from __future__ import annotations

import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

import jouleprof
from jouleprof.attribution.sensor_file import SensorFileError, read_sensor
from jouleprof.store.rundir import RunDir

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "ref_loops"
SENSOR = RESULTS / "sensor_lag" / "h100.json"
PLAIN = RESULTS / "h100_call13" / "infer_mixed.tar.gz"


def test_a_bad_sensor_file_is_refused_before_the_run(tmp_path):
    with pytest.raises(SensorFileError, match="no sensor file"):
        jouleprof.profile(tmp_path / "run", sensor=tmp_path / "none.json")
    assert not (tmp_path / "run").exists()


@pytest.fixture()
def plain_run(tmp_path) -> Path:
    if not (PLAIN.is_file() and SENSOR.is_file()):
        pytest.skip("committed H100 run absent")
    with tarfile.open(PLAIN) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "loops" / "infer_mixed" / "fine"


def _exit_attribution(run: Path, sensor) -> dict:
    prof = jouleprof.profile(run.parent / "unused", sensor=sensor, report=False)
    assert prof._attribute_measured(RunDir(run), quiet=True) == "regression"
    return RunDir(run).read_record().extra["attribution"]["regression"]


def test_the_profile_takes_the_lag_on_the_same_gpu_model_only(plain_run):
    fit = read_sensor(SENSOR)
    assert _exit_attribution(plain_run, SENSOR)["buffer_lag_prior_s"] == fit.buffer_lag_s
    other = replace(fit, gpu="NVIDIA H200")  # a SensorFit is taken as it is
    assert "buffer_lag_prior_s" not in _exit_attribution(plain_run, other)
