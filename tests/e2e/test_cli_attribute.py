"""`jouleprof attribute` end to end: a simulated run's directory in, phases.csv and JSON out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jouleprof.attribution import IsolationResult, write_isolation_csv
from jouleprof.sensors.simulated_workload import PhaseSpec, SimulatedRun, simulate_training
from jouleprof.store.rundir import RunDir
from jouleprof.types import PHASE_COLUMNS, RunRecord, Sample, Span

JP = [sys.executable, "-m", "jouleprof.cli.main"]
PHASES = [
    PhaseSpec("data", 0.008, 150.0),
    PhaseSpec("forward", 0.120, 480.0),
    PhaseSpec("backward", 0.200, 600.0),
    PhaseSpec("optimizer", 0.035, 430.0),
    PhaseSpec("ema", 0.010, 495.0),
]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=120)


def write_run(path: Path, sim: SimulatedRun, devices: tuple[str, ...] = ("gpu0",)) -> Path:
    rd = RunDir.create(path, RunRecord(run_id=path.name, kind="simulated"))
    w = rd.sample_writer()
    for dev in devices:  # the same readings on every device: the total is a multiple
        w.write(
            [
                Sample(**{**{f: getattr(s, f) for f in s.__slots__}, "device": dev})
                for s in sim.samples
            ]
        )
    w.close()
    w = rd.span_writer()
    w.write([Span(s.step, s.phase, float(s.t0_s), float(s.t1_s)) for s in sim.spans])
    w.close()
    return path


@pytest.fixture(scope="module")
def sim() -> SimulatedRun:
    return simulate_training(PHASES, 320, span_noise_s=50e-6, seed=4)


def test_regression_json_and_phases_csv(tmp_path, sim):
    d = write_run(tmp_path / "run", sim)
    r = run("attribute", str(d), "--method", "regression", "--json", "--target-pct", "1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "measured"  # gpu0's readings (simulated here, as a GPU's would be)
    # Every phase wider than ±1 % gets the steps ±1 % would need. Its half-width has a noise
    # part ν, which falls as 1/√steps, and a fixed part φ (the sensor model's spread), which
    # does not: ±1 % takes n·ν²/(0.01² − φ²) steps, and never comes where φ ≥ 1 %.
    needs = {n["phase"]: n for n in doc["steps_needed"]["phases"]}
    wide = {p["phase"]: p for p in doc["devices"][0]["phases"] if p["rel_halfwidth"] > 0.01}
    assert set(needs) == set(wide) and needs
    for name, n in needs.items():
        rel, fixed = wide[name]["rel_halfwidth"], n["fixed_rel"]
        assert n["n_steps"] == 319 and 0 <= fixed <= rel
        if fixed >= 0.01:
            assert n["steps_needed"] is None
        else:
            want = 319 * (rel**2 - fixed**2) / (0.01**2 - fixed**2)
            assert n["steps_needed"] == pytest.approx(max(want, 320), rel=1e-3, abs=1)
    assert doc["method"] == "regression" and doc["total"] is None
    (dev,) = doc["devices"]
    assert dev["device"] == "gpu0" and dev["warmup_steps"] == 1 and dev["n_steps"] == 319
    truth = sim.true_energy_in_steps_j(set(range(1, 320)))
    phases = {p["phase"]: p for p in dev["phases"]}
    assert list(phases) == [p.name for p in PHASES]
    for spec in PHASES:
        p = phases[spec.name]
        assert p["resolved"] and p["method"] == "regression"
        assert p["energy_lo_j"] <= p["energy_j"] <= p["energy_hi_j"]
        assert p["rel_halfwidth"] < 0.5
        if spec.duration_s >= 0.03:
            assert p["energy_j"] == pytest.approx(truth[spec.name], rel=0.02)
            assert p["mean_power_w"] == pytest.approx(spec.power_w, rel=0.02)
    assert sum(p["share_pct"] for p in phases.values()) == pytest.approx(100.0)
    assert dev["diagnostics"]["n_rows"] > 1000

    table = pd.read_csv(d / "phases.csv")
    assert list(table.columns[: len(PHASE_COLUMNS)]) == list(PHASE_COLUMNS)
    for col in ("device", "time_per_step_s", "mean_power_w", "share_pct", "resolved", "note"):
        assert col in table.columns
    assert list(table["phase"]) == [p.name for p in PHASES]
    assert set(table["method"]) == {"regression"} and set(table["device"]) == {"gpu0"}
    assert table["energy_j"].tolist() == pytest.approx([phases[n]["energy_j"] for n in table.phase])


def test_table_output_and_the_baseline(tmp_path, sim):
    d = write_run(tmp_path / "run", sim)
    r = run("attribute", str(d), "--method", "proportional")
    assert r.returncode == 0, r.stderr
    for name in ("data", "forward", "backward", "optimizer", "ema", "proportional"):
        assert name in r.stdout
    assert "phases_proportional.csv" in r.stderr
    # Each method writes its own file; phases.csv is the regression's alone.
    assert not (d / "phases.csv").exists()
    table = pd.read_csv(d / "phases_proportional.csv")
    assert set(table["method"]) == {"proportional"}
    # Every phase gets the same power under time share.
    assert table["mean_power_w"].nunique() == 1


def test_isolation_from_isolation_csv(tmp_path, sim):
    d = write_run(tmp_path / "run", sim)
    per_call = {p.name: p.power_w * p.duration_s for p in PHASES}
    loops = [("forward", 50), ("forward+backward", 20), ("optimizer", 150), ("ema", 500)]
    rows = []
    for replay, n in loops:
        e = n * sum(per_call[p] for p in replay.split("+"))
        t = n * sum(next(s.duration_s for s in PHASES if s.name == p) for p in replay.split("+"))
        rows.append(IsolationResult(replay, n, t, e, 0.995 * e, 1.005 * e))
    write_isolation_csv(d, rows)
    r = run("attribute", str(d), "--method", "isolation", "--json")
    assert r.returncode == 0, r.stderr
    phases = {p["phase"]: p for p in json.loads(r.stdout)["devices"][0]["phases"]}
    assert not phases["data"]["resolved"] and phases["data"]["energy_j"] is None
    truth = sim.true_energy_in_steps_j(set(range(1, 320)))
    for name in ("forward", "backward", "optimizer", "ema"):
        p = phases[name]
        assert p["resolved"]
        # The replays ran at nominal durations; the run's durations jittered by 5 % each.
        assert p["energy_j"] == pytest.approx(truth[name], rel=0.02)
        assert p["mean_power_w"] == pytest.approx(next(s.power_w for s in PHASES if s.name == name))


def test_two_devices_and_their_total(tmp_path, sim):
    d = write_run(tmp_path / "run", sim, devices=("gpu0", "gpu1"))
    r = run("attribute", str(d), "--method", "proportional", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["device"] for x in doc["devices"]] == ["gpu0", "gpu1"]
    for dev in doc["devices"]:  # step_energy_j is over every analysed step; this is per step
        per_step = dev["step_energy_j"] / dev["n_steps"]
        assert dev["energy_per_step_j"] == pytest.approx(per_step)
    total = {p["phase"]: p for p in doc["total"]}
    one = {p["phase"]: p for p in doc["devices"][0]["phases"]}
    for name in one:
        assert total[name]["energy_j"] == pytest.approx(2 * one[name]["energy_j"])
        assert total[name]["device"] == "total"
    table = pd.read_csv(d / "phases_proportional.csv")
    assert sorted(set(table["device"])) == ["gpu0", "gpu1", "total"]
    r = run("attribute", str(d), "--device", "gpu1", "--method", "proportional", "--json")
    assert [x["device"] for x in json.loads(r.stdout)["devices"]] == ["gpu1"]


def test_bad_input_exits_non_zero_with_a_message(tmp_path, sim):
    d = write_run(tmp_path / "run", sim)
    (d / "spans.csv").unlink()
    r = run("attribute", str(d))
    assert r.returncode == 2 and "no phase spans" in r.stderr and not r.stdout


def test_a_simulated_device_is_labelled_without_its_run_record(tmp_path, sim):
    """Readings of a simulated GPU ("sim0") whose run.json does not record the simulation (it
    was lost, or another tool wrote it): the device must be named, and every figure is then
    labelled SIMULATED, on the terminal and in the CSV."""
    d = write_run(tmp_path / "run", sim, devices=("sim0",))
    r = run("attribute", str(d), "--method", "proportional")
    assert r.returncode == 2 and "--device sim0" in r.stderr, r.stderr
    r = run("attribute", str(d), "--method", "proportional", "--device", "sim0")
    assert r.returncode == 0, r.stderr
    assert "sim0 is a simulated GPU" in r.stderr and "SIMULATED GPU" in r.stdout
    assert set(pd.read_csv(d / "phases_proportional.csv")["source"]) == {"simulated"}
    r = run("attribute", str(d), "--method", "proportional", "--device", "sim0", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"] == "simulated"
