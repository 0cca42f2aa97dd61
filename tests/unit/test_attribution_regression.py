"""The CPU target of issue 3: regression recovers per-phase energy the sensor cannot see directly.

A simulated GPU whose per-phase power is known exactly, seen through the realistic sensor model
(the counter refreshing every 100 ms with 2 ms of jitter, the power fields on their own ~101 ms
grid with 3 ms of jitter, neither known to attribution; a 25 ms instant window with 0.5 W noise;
a millijoule counter; reads picked up up to 3 ms late; span edges with 50 µs of noise), over 3
minutes of a 0.37 s step. Targets:

- every phase of ≥ 30 ms within 2 % of the truth;
- for 3-30 ms phases, an interval that says honestly how wide it is: narrower than ±50 %, and
  holding the truth as often as it claims (a 95 % interval misses about one run in twenty, so
  the coverage is checked over twelve runs, and no single run may miss by more than twice
  its half-width);
- the time-share baseline misses by far more.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from jouleprof.attribution.common import IDLE, build_timeline
from jouleprof.attribution.proportional import attribute_proportional
from jouleprof.attribution.regression import attribute_regression
from jouleprof.sensors.simulated import SensorModel
from jouleprof.sensors.simulated_workload import PhaseSpec, SimulatedRun, simulate_training


def sensor_model(**fields) -> SensorModel:
    """A SensorModel with the given fields, leaving out any this version does not have (the
    power fields' own refresh grid came later than the counter's)."""
    known = {f.name for f in dataclasses.fields(SensorModel)}
    return SensorModel(**{k: v for k, v in fields.items() if k in known})


PHASES = [
    PhaseSpec("data", 0.008, 150.0),
    PhaseSpec("forward", 0.120, 480.0),
    PhaseSpec("backward", 0.200, 600.0),
    PhaseSpec("optimizer", 0.035, 430.0),
    PhaseSpec("ema", 0.010, 495.0),
]
LONG = [p.name for p in PHASES if p.duration_s >= 0.030]
SHORT = [p.name for p in PHASES if p.duration_s < 0.030]
STEPS = 480  # 3 minutes
SEEDS = range(12)


def exact_truth(run: SimulatedRun, steps: set[int], gap: bool = False) -> dict[str, float]:
    """Each phase's energy over `steps`, from the true (noise-free) spans and schedule.

    The recorded spans carry edge noise, so the energy inside them is not the truth (it
    double-counts overlaps: +1 % for a low-power 8 ms phase between two 480 W ones).
    """
    return run.true_energy_in_steps_j(steps)


@functools.cache
def attributed(seed: int, gap_s: float = 0.0):
    run = simulate_training(PHASES, STEPS, span_noise_s=50e-6, gap_s=gap_s, seed=seed)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    reg = attribute_regression(samples, tl, "gpu0")
    prop = attribute_proportional(samples, tl, "gpu0")
    return reg, prop, exact_truth(run, set(tl.analysed_steps), gap=gap_s > 0), tl


def rel_err(value: float, truth: float) -> float:
    return (value - truth) / truth


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_regression_recovers_every_phase(seed):
    reg, prop, truth, tl = attributed(seed)
    assert tl.warmup_steps == [0]
    for name in LONG:
        p = reg.phase(name)
        assert p.resolved, p.note
        assert abs(rel_err(p.energy_j, truth[name])) < 0.02, (name, p.energy_j, truth[name])
        assert p.energy_lo_j <= p.energy_j <= p.energy_hi_j
    for name in SHORT:
        p = reg.phase(name)
        assert p.resolved, p.note
        half = 0.5 * (p.energy_hi_j - p.energy_lo_j)
        assert p.rel_halfwidth < 0.5 and "±" in p.note  # the note says how wide
        assert abs(p.energy_j - truth[name]) < 2 * half, (name, p.energy_j, truth[name], half)
    # The time-share baseline is off by far more on some phase (energy is not time).
    worst = max(abs(rel_err(prop.phase(n).energy_j, truth[n])) for n in truth)
    assert worst > 0.05
    assert abs(rel_err(prop.phase("optimizer").energy_j, truth["optimizer"])) > 0.05
    assert sum(p.share_pct for p in reg.phases) == pytest.approx(100.0)


def test_short_phase_intervals_hold_the_truth_as_often_as_they_claim():
    inside, z = [], []
    for seed in SEEDS:
        reg, _, truth, _ = attributed(seed)
        for name in SHORT:
            p = reg.phase(name)
            assert p.resolved and p.rel_halfwidth < 0.5
            inside.append(p.energy_lo_j <= truth[name] <= p.energy_hi_j)
            z.append((p.energy_j - truth[name]) / (0.5 * (p.energy_hi_j - p.energy_lo_j)))
    # 95 % intervals: 22.8 of 24 expected inside; ≥ 21 holds unless they are too narrow.
    assert sum(inside) >= 21, inside
    # Honest, not inflated: the errors use a fair part of the width (for a 95 % interval the
    # RMS of error / half-width is 0.51).
    rms = float(np.sqrt(np.mean(np.square(z))))
    assert 0.25 < rms < 0.9, rms


def test_long_phases_hold_across_seeds_and_beat_the_baseline_by_far():
    for seed in SEEDS:
        reg, prop, truth, _ = attributed(seed)
        for name in LONG:
            e_reg = rel_err(reg.phase(name).energy_j, truth[name])
            e_prop = rel_err(prop.phase(name).energy_j, truth[name])
            assert abs(e_reg) < 0.02
            if name != "forward":  # forward's power is near the step's mean: time share is close
                assert abs(e_prop) > 5 * abs(e_reg) and abs(e_prop) > 0.05, (name, e_prop)


def test_idle_gaps_between_steps_get_their_own_power():
    reg, prop, truth, tl = attributed(0, gap_s=0.03)
    assert tl.time_s[IDLE] == pytest.approx(0.03 * (STEPS - 1), rel=0.01)
    idle = reg.phase(IDLE)
    assert idle.resolved and idle.share_pct is None
    assert idle.mean_power_w == pytest.approx(90.0, rel=0.02)
    for name in LONG:
        assert abs(rel_err(reg.phase(name).energy_j, truth[name])) < 0.02
    for name in SHORT:
        p = reg.phase(name)
        assert p.resolved and p.rel_halfwidth < 0.5
        assert abs(p.energy_j - truth[name]) < (p.energy_hi_j - p.energy_lo_j)


def test_steps_in_lockstep_with_the_sensor_are_flagged_and_never_guessed():
    # 400 ms steps with no jitter, and both the counter and the power fields on a 100 ms grid:
    # every refresh edge falls at the same four points of a step.
    phases = [PhaseSpec(p.name, p.duration_s, p.power_w, duration_jitter=0.0) for p in PHASES]
    phases[1] = PhaseSpec("forward", 0.130, 480.0, duration_jitter=0.0)
    phases[3] = PhaseSpec("optimizer", 0.052, 430.0, duration_jitter=0.0)
    model = sensor_model(power_refresh_s=0.1)
    run = simulate_training(phases, 300, span_noise_s=50e-6, seed=0, model=model)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    reg = attribute_regression(samples, tl, "gpu0")
    assert any("lockstep" in n for n in reg.notes)
    power = {p.name: p.power_w for p in phases}
    unresolved = [p for p in reg.phases if not p.resolved]
    assert unresolved  # the short phases cannot be separated
    for p in reg.phases:
        if p.resolved:  # what is reported is still right, within its (wide) interval
            # (a joint row "a+b" weighs phases the fit could not split: its truth is their sum)
            truth = sum(power[m] * tl.time_s[m] for m in p.phase.split("+"))
            assert abs(p.energy_j - truth) < p.energy_hi_j - p.energy_lo_j, p
        else:
            assert p.energy_j is None and p.energy_lo_j is None and p.note


def test_unrecorded_work_between_steps_is_left_out_not_called_idle():
    # Steps 150-249 ran without the recorder (an overhead block): the GPU was busy, not idle.
    run = simulate_training(PHASES, 400, span_noise_s=50e-6, seed=5)
    spans = run.spans_frame()
    spans = spans[(spans["step"] < 150) | (spans["step"] >= 250)]
    samples = run.samples_frame()
    tl = build_timeline(spans, samples["t_s"].min(), samples["t_s"].max())
    assert len(tl.runs_s) == 2 and IDLE not in tl.time_s
    truth = exact_truth(run, set(tl.analysed_steps))
    reg = attribute_regression(samples, tl, "gpu0")
    prop = attribute_proportional(samples, tl, "gpu0")
    for name in LONG:
        assert abs(rel_err(reg.phase(name).energy_j, truth[name])) < 0.02
    for name in SHORT:
        p = reg.phase(name)
        assert p.resolved and abs(p.energy_j - truth[name]) < p.energy_hi_j - p.energy_lo_j
    # The baseline measures only the recorded steps' windows.
    assert prop.step_energy_j == pytest.approx(sum(truth.values()), rel=0.005)


def _short_pair_after_backward(opt_s: float, ema_s: float):
    """Regression and truth over 120 steps of forward, backward, then "opt" and "ema"."""
    phases = [
        PhaseSpec("forward", 0.140, 480.0),
        PhaseSpec("backward", 0.220, 600.0),
        PhaseSpec("opt", opt_s, 430.0),
        PhaseSpec("ema", ema_s, 520.0),
    ]
    run = simulate_training(phases, 120, span_noise_s=50e-6, seed=0)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    return attribute_regression(samples, tl, "gpu0"), exact_truth(run, set(tl.analysed_steps))


def test_phases_the_fit_cannot_split_are_weighed_together():
    # A 0.6 ms and a 0.5 ms phase back to back after a long one, over only 120 steps: this
    # seed's fit gives the first more power than the sensor ever read (it absorbs its
    # neighbour), the second an interval wider than itself, so neither is resolved; their sum
    # is a row of its own whose interval holds the truth. (With each power reading placed by
    # its own update bracket, 4 ms and 3 ms phases, and even 2 ms and 1.5 ms, are resolved.)
    reg, truth = _short_pair_after_backward(0.0006, 0.0005)
    by = {p.phase: p for p in reg.phases}
    assert not by["opt"].resolved and "absorbs a neighbour" in by["opt"].note
    assert not by["ema"].resolved
    joint = by["opt+ema"]
    assert joint.resolved and "jointly" in joint.note
    assert joint.energy_lo_j <= truth["opt"] + truth["ema"] <= joint.energy_hi_j
    assert joint.time_s == pytest.approx(by["opt"].time_s + by["ema"].time_s)
    assert [p.phase for p in reg.phases if "+" in p.phase] == ["opt+ema"]


def test_short_back_to_back_phases_are_resolved_by_their_readings_own_brackets():
    # The 4 ms + 3 ms pair that a grid-placed fit could not split (its power readings placed on
    # the power fields' jittery grid): each reading placed within the two reads between which
    # its value appeared, both phases come out, each truth inside its interval.
    reg, truth = _short_pair_after_backward(0.004, 0.003)
    for name in ("opt", "ema"):
        p = reg.phase(name)
        assert p.resolved and p.energy_lo_j <= truth[name] <= p.energy_hi_j, p


def test_a_boxcar_cut_in_two_boxes_is_the_same_kernel():
    # The kernel path (instant rows as weighted boxes) agrees with the plain window exactly
    # when the boxes make up the same boxcar; another kernel changes the fit.
    from jouleprof.attribution.regression import RegressionConfig

    run = simulate_training(PHASES, 150, span_noise_s=50e-6, seed=4)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    plain = attribute_regression(samples, tl, "gpu0")
    halves = attribute_regression(
        samples, tl, "gpu0", RegressionConfig(instant_kernel=((1.0, 0.5, 0.5), (0.5, 0.0, 0.5)))
    )
    front = attribute_regression(
        samples, tl, "gpu0", RegressionConfig(instant_kernel=((1.0, 0.5, 0.9), (0.5, 0.0, 0.1)))
    )
    for name in LONG:
        assert halves.phase(name).energy_j == pytest.approx(plain.phase(name).energy_j, rel=1e-6)
    assert any(
        front.phase(n).energy_j != pytest.approx(plain.phase(n).energy_j, rel=1e-4) for n in LONG
    )


@pytest.mark.parametrize(
    "kernel",
    [(), ((0.5, 1.0, 1.0),), ((1.0, 0.0, 0.7),), ((1.0, 0.0),), ((1.0, -0.1, 1.0),)],
)
def test_a_kernel_that_is_not_boxes_summing_to_one_is_refused(kernel):
    from jouleprof.attribution.regression import RegressionConfig

    with pytest.raises(ValueError, match="instant_kernel"):
        RegressionConfig(instant_kernel=kernel)


def test_systematic_spread_of_a_sum_keeps_the_powers_correlation():
    # A perturbation of the sensor model that moves power from one phase to its neighbour
    # leaves their sum's energy alone: a joint row must not add the two spreads in quadrature.
    from jouleprof.attribution.regression import RegressionConfig, _energy_interval

    cfg = RegressionConfig(min_rel_halfwidth=0.0)
    power = np.array([500.0, 500.0])
    boot = np.tile(power, (400, 1))  # no sampling spread: only the systematic one
    t = np.array([0.01, 0.01])
    trade = np.array([[50.0, -50.0]])  # one perturbation: +50 W here, −50 W there
    e, lo, hi = _energy_interval(power, boot, trade, [0, 1], t, cfg)
    assert e == pytest.approx(10.0) and lo == pytest.approx(10.0) and hi == pytest.approx(10.0)
    e1, lo1, hi1 = _energy_interval(power, boot, trade, [0], t[:1], cfg)
    assert hi1 - e1 == pytest.approx(1.959964 * 50 * 0.01, rel=1e-4)  # alone: its own spread
    same = np.array([[50.0, 50.0]])  # moving both the same way adds up
    _, lo2, hi2 = _energy_interval(power, boot, same, [0, 1], t, cfg)
    assert hi2 - 10.0 == pytest.approx(1.959964 * 100 * 0.01, rel=1e-4)
