"""`jouleprof sensors --lag-out` on a real GPU: the lag loop of varied steps, its fitted power-
buffer lag written as a sensor file, and `attribute --sensor` taking it (marker gpu)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jouleprof.attribution.sensor_file import read_sensor

pytestmark = pytest.mark.gpu


def _jp(*args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_lag_loop_writes_a_sensor_file_that_attribution_takes(tmp_path):
    pytest.importorskip("torch")
    f, run = tmp_path / "sensor.json", tmp_path / "run"
    r = _jp("sensors", "--lag-out", f, "--lag-s", 20, "--run-dir", run)
    assert r.returncode == 0, r.stderr[-2000:]
    fit = read_sensor(f)
    assert fit.varied and fit.device == "gpu0" and fit.n_buffer_rows > 500
    assert 0.001 < fit.buffer_lag_s < 0.009  # the prior's ±2σ
    print(f"{fit.gpu}: lag {1e3 * fit.buffer_lag_s:.2f} ms ±{1e3 * fit.buffer_lag_sd_s:.2f}")
    r = _jp("attribute", run, "--sensor", f, "--device", "gpu0")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "buffer lag" in r.stderr and "gemm" in r.stdout
