"""Baseline and cross-check cells sample no GPU, yet their hardware record names the
workload's GPUs (MFU needs their model); a run that describes none on purpose says so."""

from __future__ import annotations

import json

import pytest

from jouleprof import hardware
from jouleprof.bench.cellsummary import _described_gpu_count, _peak_flops
from jouleprof.bench.modes import Mode
from jouleprof.hardware import NO_GPU_MEASURED, hardware_record, missing
from jouleprof.measurement import MeasureConfig, measure


def test_described_gpus_default_to_the_measured_ones():
    assert MeasureConfig().described_gpus is None  # every visible GPU
    assert MeasureConfig(gpus=(1,)).described_gpus == (1,)
    assert MeasureConfig(gpus=(), hardware_gpus=(0, 1)).described_gpus == (0, 1)
    with pytest.raises(ValueError, match="hardware_gpus must be non-negative"):
        MeasureConfig(hardware_gpus=(-1,))


def test_gpu_indices_are_checked_and_normalized():
    """An integer is one GPU and a list a tuple; a string, a float or a bool is refused by name
    (a string used to reach the sampler and fail there with a TypeError)."""
    assert MeasureConfig(gpus=0).gpus == (0,)
    assert MeasureConfig(gpus=[0, 1]).gpus == (0, 1)
    for bad in ("0", (0.5,), True, ("a",)):
        with pytest.raises(ValueError, match=r"gpus must be GPU indices such as \(0,\)"):
            MeasureConfig(gpus=bad)
    with pytest.raises(ValueError, match="gpus must be GPU indices"), measure(None, gpus="0"):
        pass


@pytest.mark.parametrize("mode", [Mode.BASELINE, Mode.CODECARBON, Mode.ZEUS])
def test_unsampled_modes_describe_the_workloads_gpus(mode):
    cfg = mode.measure_config([2])
    assert cfg.gpus == () and not cfg.rapl  # nothing sampled
    assert cfg.hardware_gpus == (2,) and cfg.described_gpus == (2,)
    # The workload cannot say which GPUs it uses: none is described, rather than a guess.
    assert mode.measure_config(None).described_gpus == ()


def test_sampled_modes_describe_what_they_measure():
    for mode in (Mode.FINE, Mode.E2E):
        cfg = mode.measure_config((0,))
        assert cfg.hardware_gpus is None and cfg.described_gpus == (0,)


def test_no_gpu_on_purpose_is_not_no_gpu_visible():
    gpus = hardware_record(())["gpus"]
    assert gpus == missing(NO_GPU_MEASURED)
    assert "no GPU measured in this run" in gpus["reason"]
    assert "visible" not in gpus["reason"]


def test_baseline_run_records_the_workloads_gpus(monkeypatch, tmp_path):
    asked = []

    def fake_record(gpu_indices=None, environ=None):
        asked.append(gpu_indices)
        return {"gpus": [{"device": "gpu1", "name": "NVIDIA H200"}]}

    monkeypatch.setattr(hardware, "hardware_record", fake_record)
    with measure(tmp_path / "run", Mode.BASELINE.measure_config((1,))) as m:
        assert m.devices == []  # no sensor opened
    assert asked == [(1,)]
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert rec["config"]["measure"]["gpus"] == []
    assert rec["config"]["measure"]["hardware_gpus"] == [1]
    peak, why = _peak_flops(rec["hardware"])
    assert peak == 989e12 and "H200" in why
    assert _described_gpu_count(rec["hardware"]) == 1


def test_mfu_reason_quotes_the_hardware_records_reason():
    peak, why = _peak_flops({"gpus": missing(NO_GPU_MEASURED)})
    assert peak is None and NO_GPU_MEASURED in why and "GPU none" not in why
    assert _described_gpu_count({"gpus": missing(NO_GPU_MEASURED)}) == 0
    peak, why = _peak_flops({"gpus": [{"name": "Some GPU"}]})
    assert peak is None and "Some GPU" in why
