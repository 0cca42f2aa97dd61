"""NVML's power-sample buffer copied beside a run (sensors/nvml_buffer.py).

No driver here: a stand-in for the pynvml module serves the buffer as the H200's did — the
samples newer than the timestamp asked for, NOT_FOUND when none is new.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pandas as pd
import pytest

from jouleprof.clock import MonotonicClock
from jouleprof.sensors.nvml_buffer import POWER_BUFFER_COLUMNS, PowerBufferRecorder


class _Buffer:
    """Per handle, a ring of (timestamp µs, mW) the test fills."""

    def __init__(self):
        self.rings: dict[str, list[tuple[int, int]]] = {}
        self.asked: list[tuple[str, int]] = []
        self.NVML_TOTAL_POWER_SAMPLES = 0

    def nvmlDeviceGetSamples(self, handle, kind, since_us):
        self.asked.append((handle, since_us))
        new = [(t, mw) for t, mw in self.rings.get(handle, []) if t > since_us]
        if not new:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return 1, [
            SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=mw)) for t, mw in new
        ]


def test_samples_are_kept_once_each_on_the_run_clock(tmp_path):
    nv, clock = _Buffer(), MonotonicClock()
    now_us = int(time.time() * 1e6)
    nv.rings["h0"] = [(now_us - 50_000, 100_000)]  # before the run: not ours
    rec = PowerBufferRecorder(nv, {"gpu0": "h0", "gpu1": "h1"}, clock, tmp_path / "pb.csv", 0.05)
    t_start_run = clock.now_s()
    base = int(time.time() * 1e6)
    nv.rings["h0"] += [(base + 20_000, 300_000), (base + 40_000, 650_000)]
    time.sleep(0.15)  # the thread reads them
    nv.rings["h0"] += [(base + 60_000, 700_500)]  # the ring still holds the old ones too
    nv.rings["h1"] = [(base + 30_000, 90_000)]
    summary = rec.stop()
    df = pd.read_csv(tmp_path / "pb.csv")
    assert tuple(df.columns) == POWER_BUFFER_COLUMNS
    g0 = df[df.device == "gpu0"]
    assert list(g0.power_w) == [300.0, 650.0, 700.5]  # each once, the pre-run one left out
    assert list(df[df.device == "gpu1"].power_w) == [90.0]
    assert g0.t_s.diff().dropna().tolist() == pytest.approx([0.02, 0.02], abs=1e-6)
    assert g0.t_s.iloc[0] == pytest.approx(t_start_run + 0.02, abs=0.01)  # on the run's clock
    assert summary["n_samples"] == 4 and summary["n_failed_reads"] >= 1
    assert "NOT_FOUND" in summary["errors"][0]
    assert rec.stop()["n_samples"] == 4  # stopping twice changes nothing


def test_a_read_period_the_buffer_cannot_cover_is_refused(tmp_path):
    with pytest.raises(ValueError, match="every_s"):
        PowerBufferRecorder(_Buffer(), {}, MonotonicClock(), tmp_path / "x.csv", every_s=3.0)


def test_measure_without_an_nvidia_gpu_says_why_there_is_no_buffer(tmp_path):
    from jouleprof.measurement import measure
    from jouleprof.store.rundir import RunDir

    with measure(
        tmp_path / "run", gpus=(), simulate_gpu_w=100.0, idle_s=0.0, power_buffer=True, rapl=False
    ):
        time.sleep(0.05)
    rec = RunDir(tmp_path / "run").read_record()
    assert any("power buffer not recorded: no NVIDIA GPU" in n for n in rec.notes)
    assert "power_buffer" not in rec.extra
    assert not (tmp_path / "run" / "power_buffer.csv").exists()
