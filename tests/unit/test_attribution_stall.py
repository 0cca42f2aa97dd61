"""The regression's stall model: host-paced phases as fixed work plus stalls at one power."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from jouleprof.attribution import attribute
from jouleprof.attribution.common import build_timeline
from jouleprof.attribution.regression import RegressionConfig
from jouleprof.attribution.stall import STALL, split_stalls
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training


def _timeline(backward_ms):
    rows, t = [], 1.0
    for step, b in enumerate(backward_ms):
        rows += [(step, "forward", t, t + 0.05), (step, "backward", t + 0.05, t + 0.05 + b / 1e3)]
        t += 0.05 + b / 1e3
    spans = pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])
    return build_timeline(spans, 0.0, t + 1.0, warmup_steps=0)


def test_a_phase_keeps_its_shortest_time_as_work_and_the_rest_is_stall():
    tl = _timeline([80, 80, 120, 100, 80, 160])
    sp = split_stalls(tl, quantile=0.0)
    assert sp.work_per_step_s["backward"] == pytest.approx(0.080)
    assert sp.work_s["backward"] == pytest.approx(6 * 0.080)
    assert sp.stall_s["backward"] == pytest.approx(0.040 + 0.020 + 0.080)
    assert sp.stall_s["forward"] == pytest.approx(0.0, abs=1e-12)  # its time never varies
    # Time is only re-labelled: every phase's work + stall is its time, every instant shared
    # out in full, the stall column holding the stalls.
    for name in ("forward", "backward"):
        assert sp.work_s[name] + sp.stall_s[name] == pytest.approx(tl.time_s[name])
    assert np.allclose(sp.timeline.weights.sum(axis=1), 1.0)
    whole = sp.timeline.overlap_s(np.array([0.0]), np.array([tl.edges_s[-1]]))[0]
    assert whole[sp.timeline.names.index(STALL)] == pytest.approx(0.140)
    # The slowest step's backward is half work, half stall, spread evenly through it.
    t0 = tl.step_extents_s[5][0] + 0.05
    mid = sp.timeline.overlap_s(np.array([t0 + 0.04]), np.array([t0 + 0.08]))[0]
    assert mid[sp.timeline.names.index("backward")] == pytest.approx(0.020)
    assert mid[sp.timeline.names.index(STALL)] == pytest.approx(0.020)
    with pytest.raises(ValueError, match="quantile"):
        split_stalls(tl, quantile=0.5)


STALLED = [
    PhaseSpec("forward", 0.06, 700, 0.01),
    PhaseSpec("backward", 0.075, 520, 0.01, stall_s=0.06, stall_w=120),
    PhaseSpec("optimizer", 0.0053, 600, 0.01, stall_s=0.004, stall_w=120),
    PhaseSpec("ema", 0.0034, 580, 0.01),
]
STEADY = [
    PhaseSpec("forward", 0.06, 700, 0.05),
    PhaseSpec("backward", 0.09, 450, 0.10),
    PhaseSpec("optimizer", 0.006, 600, 0.10),
    PhaseSpec("ema", 0.0035, 580, 0.05),
]


def _run_dir(tmp_path, phases, seed=0):
    run = simulate_training(phases, 150, seed=seed, span_noise_s=20e-6)
    run.samples_frame().to_csv(tmp_path / "samples.csv", index=False)
    pd.DataFrame([asdict(s) for s in run.spans]).to_csv(tmp_path / "spans.csv", index=False)
    return run


def _backward_error(result, run):
    e = {p.phase: p.energy_j for p in result.devices[0].phases}
    return e["backward"] / run.true_energy_j["backward"] - 1


def test_on_a_host_paced_step_the_stall_model_is_chosen_and_puts_the_backward_back(tmp_path):
    run = _run_dir(tmp_path, STALLED)
    plain = attribute(tmp_path, "regression", None, 0, stall_model=False, bins=False)
    auto = attribute(tmp_path, "regression", None, 0)
    dev = auto.devices[0]
    assert dev.diagnostics["stall_model_choice"]["chosen"] == "stall"
    assert 60 < dev.diagnostics["stall"]["power_w"] < 180  # waits drew 120 W, the work 520–700
    assert abs(_backward_error(auto, run)) < 0.02
    # One power per phase explains the readings far worse (and books the backward low by
    # 1–4 % depending on the seed; by 5–21 % on the H200).
    res = dev.diagnostics["stall_model_choice"]["residual_rms_w"]
    assert res["stall"] < 0.8 * res["plain"]
    assert plain.devices[0].diagnostics["residual_rms_w"] == pytest.approx(res["plain"])
    # Phases report their whole time (work + stall), and the step's energy is all there.
    bwd = next(p for p in dev.phases if p.phase == "backward")
    assert bwd.time_s == pytest.approx(run.true_time_s["backward"], rel=0.01)
    in_steps = sum(v for k, v in run.true_energy_j.items() if k != "idle")
    assert dev.step_energy_j == pytest.approx(in_steps, rel=0.01)
    assert any("model: stall" in n for n in dev.notes)


def test_a_phase_beside_an_unphysical_fit_is_not_reported_alone(tmp_path):
    # The 5 ms optimizer beside the 3 ms EMA, 300 host-paced steps: the EMA is fitted above any
    # power the sensor read, so the optimizer's own figure traded energy with it (it came out
    # "resolved" at half its true energy, the truth outside its interval). Only the pair is
    # measured, and the optimizer says why.
    # One power per phase (bins=False): the simulator puts each stall at the end of its
    # phase, a power profile the bins resolve (below), which is not what this test is about.
    run = simulate_training(STALLED, 300, seed=0, span_noise_s=20e-6)
    run.samples_frame().to_csv(tmp_path / "samples.csv", index=False)
    pd.DataFrame([asdict(s) for s in run.spans]).to_csv(tmp_path / "spans.csv", index=False)
    dev = attribute(tmp_path, "regression", None, 0, bins=False).devices[0]
    rows = {p.phase: p for p in dev.phases}
    assert not rows["ema"].resolved and "above any" in rows["ema"].note
    assert not rows["optimizer"].resolved
    assert "neighbour ema" in rows["optimizer"].note and "optimizer+ema" in rows["optimizer"].note
    pair = rows["optimizer+ema"]
    truth = run.true_energy_j["optimizer"] + run.true_energy_j["ema"]
    assert pair.resolved and pair.energy_j == pytest.approx(truth, rel=0.10)
    # The default cuts the backward into bins (work at 520 W, then the wait at 120 W): the
    # fit then explains the readings far better, and both short phases are measured, each
    # truth inside its interval (the backward, whose wait varies from step to step, within
    # 2 %: its bins hold a varying mix of work and wait).
    auto = attribute(tmp_path, "regression", None, 0).devices[0]
    assert auto.diagnostics["bins_choice"]["chosen"]
    rows = {p.phase: p for p in auto.phases}
    for name in ("optimizer", "ema"):
        p = rows[name]
        assert p.resolved and p.energy_lo_j <= run.true_energy_j[name] <= p.energy_hi_j
    assert rows["backward"].energy_j == pytest.approx(run.true_energy_j["backward"], rel=0.02)


def test_on_steady_phases_the_plain_model_stays(tmp_path):
    run = _run_dir(tmp_path, STEADY)
    auto = attribute(tmp_path, "regression", None, 0)
    dev = auto.devices[0]
    choice = dev.diagnostics["stall_model_choice"]
    assert choice["chosen"] == "plain"
    assert choice["residual_rms_w"]["stall"] > choice["residual_rms_w"]["plain"] * 0.9
    assert abs(_backward_error(auto, run)) < 0.01
    assert "stall" not in dev.diagnostics


def test_bad_stall_quantile_is_refused():
    with pytest.raises(ValueError, match="stall_quantile"):
        RegressionConfig(stall_quantile=0.7)
