"""`jouleprof measure` around a real GPU load (marker gpu: skipped without an NVIDIA GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
LOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "load_matmul.py"


def test_measure_matmul_load_counter_agrees_with_power(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouleprof.cli.main",
            "measure",
            "--gpus",
            "0",
            "--out",
            str(tmp_path / "run"),
            "--idle-s",
            "1.5",
            "--json",
            "--",
            sys.executable,
            str(LOAD),
            "--seconds",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    # stdout also carries the load's own output line: the summary is read from run.json.
    s = json.loads((tmp_path / "run" / "run.json").read_text())["summary"]
    e = s["gpu0.energy_j"]
    assert e["signal"] == "counter" and e["value"] > 0
    avg_w, idle_w = s["gpu0.avg_power_w"]["value"], s["gpu0.idle_power_w"]["value"]
    assert 30 < idle_w < avg_w < 1500
    assert abs(s["gpu0.crosscheck_instant_pct"]["value"]) < 10
    assert abs(s["gpu0.crosscheck_avg_pct"]["value"]) < 15
    period = s["gpu0.refresh_period_s"]["value"]
    assert 0.02 < period < 1.0
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert rec["status"] == "complete"
    assert rec["extra"]["sampler"]["n_counter_reads"] > 0


def test_measure_copies_nvmls_power_buffer(tmp_path):
    # The driver's ~20 ms power samples (benchmarks/results/nvml_read_cost), copied beside the
    # run: dense, on the run's clock, and in the same watts as the counter's average.
    import pandas as pd

    pytest.importorskip("torch")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "jouleprof.cli.main", "measure", "--gpus", "0", "--out"]
    cmd += [str(run), "--idle-s", "0.5", "--power-buffer", "--"]
    cmd += [sys.executable, str(LOAD), "--seconds", "4"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    rec = json.loads((run / "run.json").read_text())
    assert rec["extra"]["power_buffer"]["n_samples"] > 100
    pb = pd.read_csv(run / "power_buffer.csv")
    gaps_ms = pb["t_s"].diff().dropna() * 1e3
    assert 5 < gaps_ms.median() < 60
    samples = pd.read_csv(run / "samples.csv")
    assert samples["t_s"].min() - 1 < pb["t_s"].min() < pb["t_s"].max() < samples["t_s"].max() + 2
    work = rec["extra"]["work_interval_s"]
    inside = pb[(pb.t_s > work[0] + 0.5) & (pb.t_s < work[1] - 0.5)]
    avg_w = rec["summary"]["gpu0.avg_power_w"]["value"]
    assert inside["power_w"].mean() == pytest.approx(avg_w, rel=0.25)
