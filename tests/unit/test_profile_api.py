"""`with jouleprof.profile(dir) as prof:` — one object for a user's own loop.

On this machine (no NVIDIA GPU) the recorded phase times drive the simulated GPU; a run
directory with GPU readings (built from the simulated training run) exercises the measured
path's regression-then-proportional choice.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

import jouleprof
from jouleprof.errors import JouleprofError
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
from jouleprof.store.rundir import RunDir
from jouleprof.types import RunRecord, Sample, Span


def _busy(seconds: float) -> None:
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        pass


def _loop(prof, steps: int) -> None:
    for _ in range(steps):
        with prof.step():
            with prof.phase("data"):
                time.sleep(0.03)
            with prof.phase("forward"):
                _busy(0.05)
            with prof.phase("backward"):
                _busy(0.09)


def test_one_object_measures_records_attributes_and_prints(tmp_path, capsys):
    out = tmp_path / "run"
    with jouleprof.profile(out, warmup_steps=1) as prof:
        _loop(prof, 40)
    assert prof.run_dir == out
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "complete" and rec["kind"] == "profile"
    # fine style: the counter at every refresh
    assert rec["config"]["measure"]["counter_interval_s"] == pytest.approx(0.1)
    spans = pd.read_csv(out / "spans.csv")
    assert set(spans["phase"]) == {"data", "forward", "backward"}
    assert spans["step"].nunique() == 40
    # no GPU here: the simulated GPU, labelled, attributed by the regression
    assert rec["extra"]["simulated_gpu"]["source"] == "simulated"
    assert prof.method == "regression"
    table = prof.phases.set_index("phase")
    assert set(table["source"]) == {"simulated"}
    b = table.loc["backward"]
    # the truth inside the regression's interval, or the estimate within 5 % of it (the
    # simulated board follows the CPU's phase times, which a loaded CPU stretches unevenly)
    inside = b["energy_lo_j"] <= b["true_energy_j"] <= b["energy_hi_j"]
    assert b["resolved"] and (
        inside or b["energy_j"] == pytest.approx(b["true_energy_j"], rel=0.05)
    )
    assert b["energy_j"] == pytest.approx(b["true_energy_j"], rel=0.15)
    printed = capsys.readouterr()
    assert "backward" in printed.out and "SIMULATED" in printed.out
    assert str(out) in printed.err


def test_report_false_prints_nothing_and_attribute_false_writes_no_phases(tmp_path, capsys):
    with jouleprof.profile(tmp_path / "quiet", report=False, warmup_steps=0) as prof:
        _loop(prof, 12)
    assert (tmp_path / "quiet" / "phases.csv").is_file()
    with jouleprof.profile(tmp_path / "raw", attribute=False, report=False) as prof:
        _loop(prof, 3)
    assert not (tmp_path / "raw" / "phases.csv").exists()
    assert (tmp_path / "raw" / "spans.csv").is_file() and prof.phases is None
    assert capsys.readouterr().out == ""


def test_a_run_with_nothing_left_to_attribute_says_why(tmp_path, capsys):
    with jouleprof.profile(tmp_path / "short", warmup_steps=100) as prof:
        _loop(prof, 3)
    assert prof.phases is None
    err = " ".join(capsys.readouterr().err.split())
    assert "attribution by regression not possible" in err
    assert "100 are excluded as warm-up" in err


def test_an_exception_in_the_loop_keeps_the_data_and_skips_attribution(tmp_path):
    out = tmp_path / "boom"
    with pytest.raises(RuntimeError, match="boom"), jouleprof.profile(out) as prof:
        _loop(prof, 2)
        raise RuntimeError("boom")
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "incomplete"
    assert pd.read_csv(out / "spans.csv")["step"].nunique() == 2
    assert not (out / "phases.csv").exists()


def test_step_outside_the_block_and_bad_arguments_say_what_to_do(tmp_path):
    prof = jouleprof.profile(tmp_path / "x")
    with pytest.raises(JouleprofError, match="inside"):
        prof.step()
    with pytest.raises(ValueError, match="warmup_steps"):
        jouleprof.profile(tmp_path / "y", warmup_steps=-1)
    with pytest.raises(ValueError, match="interval_s"):
        jouleprof.profile(tmp_path / "y", interval_s=0)


def test_measured_runs_take_the_regression_and_write_each_methods_file(tmp_path):
    sim = simulate_training(
        [PhaseSpec("forward", 0.12, 480.0), PhaseSpec("backward", 0.2, 600.0)], 60, seed=3
    )
    rd = RunDir.create(tmp_path / "gpu", RunRecord(run_id="gpu", kind="profile"))
    w = rd.sample_writer()
    w.write(
        [
            Sample(**{**{f: getattr(s, f) for f in s.__slots__}, "device": "gpu0"})
            for s in sim.samples
        ]
    )
    w.close()
    w = rd.span_writer()
    w.write([Span(s.step, s.phase, s.t0_s, s.t1_s) for s in sim.spans])
    w.close()
    prof = jouleprof.profile(rd.path, warmup_steps=1)
    assert prof._attribute_measured(rd, quiet=True) == "regression"
    for name in ("phases.csv", "phases_regression.csv", "phases_proportional.csv"):
        assert rd.has(name)
    assert set(pd.read_csv(rd.path / "phases.csv")["method"]) == {"regression"}
    truth = sim.true_energy_in_steps_j(set(range(1, 60)))
    got = pd.read_csv(rd.path / "phases.csv").set_index("phase")
    assert got.loc["backward", "energy_j"] == pytest.approx(truth["backward"], rel=0.02)
    assert rd.read_record().extra["attribution"]["proportional"]["ok"]


def test_excite_puts_recorded_gaps_in_some_steps_and_bad_values_are_refused(tmp_path):
    out = tmp_path / "excited"
    cfg = jouleprof.ExciteConfig(fraction=0.5, window_s=60.0, boundary_prob=1.0, seed=1)
    with jouleprof.profile(out, report=False, attribute=False, excite=cfg) as prof:
        _loop(prof, 12)
    rec = json.loads((out / "run.json").read_text())
    assert rec["config"]["profile"]["excite"] is True
    excited = rec["extra"]["excite"]
    spans = pd.read_csv(out / "spans.csv")
    gaps = spans[spans["phase"] == "excite_gap"]
    assert 0 < gaps["step"].nunique() < 12  # some steps, not all
    assert sorted(excited["excited_steps"]) == sorted(gaps["step"].unique())  # said in run.json
    with pytest.raises(ValueError, match="excite"):
        jouleprof.profile(tmp_path / "bad", excite="yes")


def test_arguments_of_the_wrong_type_say_which(tmp_path):
    with pytest.raises(TypeError, match="run directory is a path"):
        jouleprof.profile(123)
    with pytest.raises(TypeError, match="ExciteConfig.window_s is a number, got str"):
        jouleprof.ExciteConfig(fraction=0.3, window_s="30")
    with (
        jouleprof.profile(tmp_path / "r", report=False, attribute=False) as prof,
        prof.step(),
        pytest.raises(TypeError, match="a phase name is a str, got int"),
    ):
        prof.phase(3)
