"""benchmarks/instant_kernel.py finds the simulated instant field's kernel from a square load."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training

ROOT = Path(__file__).resolve().parents[2]


def _instant_kernel():
    spec = importlib.util.spec_from_file_location(
        "instant_kernel", ROOT / "benchmarks" / "instant_kernel.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_square_load_singles_out_the_sensors_own_kernel(tmp_path):
    # kernel_probe.py's load on the simulated GPU, whose instant field is a 25 ms boxcar.
    run = simulate_training(
        [PhaseSpec("busy", 0.035, 650.0), PhaseSpec("rest", 0.05, 90.0)],
        300,
        span_noise_s=50e-6,
        seed=3,
    )
    run.samples_frame().to_csv(tmp_path / "samples.csv", index=False)
    run.spans_frame().to_csv(tmp_path / "spans.csv", index=False)
    fits = _instant_kernel().fit_kernels(tmp_path)
    ranked = sorted(fits, key=lambda k: fits[k]["instant_residual_w"])
    assert ranked[0] == "box25"
    assert fits[ranked[1]]["instant_residual_w"] > 1.2 * fits["box25"]["instant_residual_w"]
    assert abs(fits["box25"]["power_w"]["busy"] - 650.0) < 20.0


def test_kernel_probe_script_runs_end_to_end_on_the_cpu(tmp_path):
    # The GPU run once died on an import (`from jouleprof import measure` gave the module):
    # the script's whole path, and instant_kernel.py on what it writes, run here first.
    import subprocess
    import sys

    import pytest

    pytest.importorskip("torch")
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = tmp_path / "probe"
    probe = [sys.executable, str(ROOT / "benchmarks" / "kernel_probe.py"), "--out", str(out)]
    r = subprocess.run(
        [*probe, "--seconds", "1", "--n", "64", "--cpu-dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    fit = _instant_kernel().fit_kernels(out)
    assert set(fit) == set(_instant_kernel().KERNELS)
    assert all({"busy"} <= set(k["power_w"]) for k in fit.values())


def test_kernel_probes_power_buffer_reader_keeps_each_sample_once_on_the_run_clock(tmp_path):
    # NVML's buffer returns every sample newer than the timestamp asked for; a stand-in for
    # the library (no driver here) serves three reads with overlapping samples.
    import importlib.util
    import time
    from types import SimpleNamespace

    from jouleprof.clock import MonotonicClock

    spec = importlib.util.spec_from_file_location("kp", ROOT / "benchmarks" / "kernel_probe.py")
    kp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kp)
    t0_us = int(time.time() * 1e6)
    served = [
        [(t0_us + 20_000, 300_000), (t0_us + 40_000, 650_000)],
        [(t0_us + 40_000, 650_000), (t0_us + 60_000, 700_000)],
        [],
    ]
    asked = []

    class NotFound(Exception):
        pass

    def get_samples(handle, kind, since_us):
        asked.append(since_us)
        batch = served.pop(0) if served else []
        if not batch:
            raise NotFound("NVML_ERROR_NOT_FOUND")
        return 1, [
            SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=mw)) for ts, mw in batch
        ]

    nv = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetSamples=get_samples,
        NVML_TOTAL_POWER_SAMPLES=0,
    )
    clock = MonotonicClock()
    buf = kp.PowerBuffer(clock, every_s=0.05, nv=nv)
    time.sleep(0.3)
    buf.close(tmp_path / "power_buffer.csv")
    assert [round(w) for _, w, _ in buf.rows] == [300, 650, 700]
    assert asked[1] == t0_us + 40_000  # then asks only for samples newer than it has
    gaps = [b[0] - a[0] for a, b in zip(buf.rows, buf.rows[1:], strict=False)]
    assert gaps == [pytest.approx(0.02, abs=1e-6)] * 2  # the driver's spacing, on the run clock
    assert buf.errors and "NOT_FOUND" in buf.errors[0]
    lines = (tmp_path / "power_buffer.csv").read_text().splitlines()
    assert lines[0] == "t_s,power_w,timestamp_us" and len(lines) == 4
