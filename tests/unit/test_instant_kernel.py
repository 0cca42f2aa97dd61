"""benchmarks/instant_kernel.py finds the simulated instant field's kernel from a square load."""

from __future__ import annotations

from pathlib import Path

import pytest

from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training

ROOT = Path(__file__).resolve().parents[2]


def test_a_square_load_singles_out_the_sensors_own_kernel(tmp_path, load_benchmark):
    # kernel_probe.py's load on the simulated GPU, whose instant field is a 25 ms boxcar.
    run = simulate_training(
        [PhaseSpec("busy", 0.035, 650.0), PhaseSpec("rest", 0.05, 90.0)],
        300,
        span_noise_s=50e-6,
        seed=3,
    )
    run.samples_frame().to_csv(tmp_path / "samples.csv", index=False)
    run.spans_frame().to_csv(tmp_path / "spans.csv", index=False)
    fits = load_benchmark("instant_kernel").fit_kernels(tmp_path)
    ranked = sorted(fits, key=lambda k: fits[k]["instant_residual_w"])
    assert ranked[0] == "box25"
    assert fits[ranked[1]]["instant_residual_w"] > 1.2 * fits["box25"]["instant_residual_w"]
    assert abs(fits["box25"]["power_w"]["busy"] - 650.0) < 20.0


def test_kernel_probe_script_runs_end_to_end_on_the_cpu(tmp_path, load_benchmark):
    # The GPU run once died on an import (`from jouleprof import measure` gave the module):
    # the script's whole path, and instant_kernel.py on what it writes, run here first.
    import subprocess
    import sys

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
    fit = load_benchmark("instant_kernel").fit_kernels(out)
    assert set(fit) == set(load_benchmark("instant_kernel").KERNELS)
    assert all({"busy"} <= set(k["power_w"]) for k in fit.values())
