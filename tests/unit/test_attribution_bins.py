"""Long phases cut into bins of time for regression (attribution.bins)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jouleprof.attribution import attribute
from jouleprof.attribution.bins import bin_counts, split_bins
from jouleprof.attribution.common import build_timeline
from jouleprof.attribution.stall import split_stalls
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training


def _timeline(backward_ms):
    rows, t = [], 1.0
    for step, b in enumerate(backward_ms):
        rows += [
            (step, "forward", t, t + 0.05),
            (step, "forward/inner", t + 0.01, t + 0.02),  # the parent in two segments
            (step, "backward", t + 0.05, t + 0.05 + b / 1e3),
            (step, "optimizer", t + 0.05 + b / 1e3, t + 0.056 + b / 1e3),
        ]
        t += 0.056 + b / 1e3
    spans = pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])
    return build_timeline(spans, 0.0, t + 1.0, warmup_steps=0)


def test_long_phases_are_cut_into_equal_bins_within_every_step():
    tl = _timeline([80, 120, 100, 100])
    assert bin_counts(tl, 0.025) == {"forward": 2, "backward": 4}  # 40 and 100 ms a step
    b = split_bins(tl, 0.025)
    out = b.timeline
    assert b.members["backward"] == [f"backward#{i}" for i in range(1, 5)]
    assert b.expand(["optimizer", "backward"]) == ["optimizer", *b.members["backward"]]
    # Time is only re-labelled: each phase's bins hold its time, short phases stay whole.
    for name, bins in b.members.items():
        assert sum(out.time_s[x] for x in bins) == pytest.approx(tl.time_s[name])
        assert name not in out.time_s and name not in out.order
    assert out.time_s["optimizer"] == pytest.approx(tl.time_s["optimizer"])
    assert out.time_s["forward/inner"] == pytest.approx(tl.time_s["forward/inner"])
    # In each step the backward's quarters are a quarter of that step's backward, in order.
    t0 = tl.step_extents_s[1][0] + 0.05  # step 1: a 120 ms backward
    for i in range(4):
        ov = out.overlap_s(np.array([t0 + 0.030 * i]), np.array([t0 + 0.030 * (i + 1)]))[0]
        assert ov[out.names.index(f"backward#{i + 1}")] == pytest.approx(0.030)
    # The forward's own time (its 40 ms around the child) splits along its time, not its
    # span: 20 ms each, the first bin spanning the child.
    f0 = tl.step_extents_s[0][0]
    first = out.overlap_s(np.array([f0]), np.array([f0 + 0.03]))[0]
    assert first[out.names.index("forward#1")] == pytest.approx(0.020)
    assert first[out.names.index("forward/inner")] == pytest.approx(0.010)
    # The stall split works on the binned timeline; a weighted one cannot be binned.
    sp = split_stalls(out, 0.0)
    with pytest.raises(ValueError, match="without weights"):
        split_bins(sp.timeline, 0.025)
    with pytest.raises(ValueError, match="bin_s"):
        bin_counts(tl, 0.0)


def test_a_replayed_phase_is_cut_per_run_not_across_its_repeats():
    """A 40 ms phase run once in most steps and twice in 4 of 10 (`replay`): its bins come from
    its time per run (2 of 20 ms, not more for the repeats), and in a repeated step each run
    gets both bins, so that bin 1 is always a run's start."""
    rows, t = [], 1.0
    for step in range(10):
        rows.append((step, "data", t, t + 0.005))
        t += 0.005
        for _ in range(2 if step in (1, 3, 5, 7) else 1):
            rows.append((step, "copy", t, t + 0.040))
            t += 0.040
        rows.append((step, "gemm", t, t + 0.010))
        t += 0.010
    spans = pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])
    tl = build_timeline(spans, 0.0, t + 1.0, warmup_steps=0)
    assert list(tl.repeated) == ["copy"] and tl.repeated["copy"].tolist() == [
        2 if s in (1, 3, 5, 7) else 1 for s in range(10)
    ]
    assert bin_counts(tl, 0.020) == {"copy": 2}  # per run, though 56 ms a step on average
    out = split_bins(tl, 0.020).timeline
    c0 = tl.step_extents_s[3][0] + 0.005  # step 3: copy, copy
    for i, name in enumerate(["copy#1", "copy#2", "copy#1", "copy#2"]):
        ov = out.overlap_s(np.array([c0 + 0.020 * i]), np.array([c0 + 0.020 * (i + 1)]))[0]
        assert ov[out.names.index(name)] == pytest.approx(0.020), (i, name)
    c0 = tl.step_extents_s[4][0] + 0.005  # a plain step: one run, both bins
    for i, name in enumerate(["copy#1", "copy#2"]):
        ov = out.overlap_s(np.array([c0 + 0.020 * i]), np.array([c0 + 0.020 * (i + 1)]))[0]
        assert ov[out.names.index(name)] == pytest.approx(0.020)
    assert out.time_s["copy#1"] == pytest.approx(out.time_s["copy#2"])
    assert out.repeated.keys() == tl.repeated.keys()


# A backward whose power steps from 380 to 680 W halfway through, recorded as one phase,
# then the short optimizer and EMA.
PHASES = [
    PhaseSpec("forward", 0.06, 700, 0.02),
    PhaseSpec("bwd_lo", 0.05, 380, 0.02),
    PhaseSpec("bwd_hi", 0.045, 680, 0.02),
    PhaseSpec("optimizer", 0.006, 520, 0.02),
    PhaseSpec("ema", 0.0035, 540, 0.02),
]


def _uneven_dir(d, seed: int) -> dict[str, float]:
    """An uneven run (PHASES, 500 steps) in `d`, its backward recorded as one phase; the true
    energy of each recorded phase."""
    run = simulate_training(PHASES, 500, seed=seed, span_noise_s=20e-6)
    run.samples_frame().to_csv(d / "samples.csv", index=False)
    sp = run.spans_frame()
    lo = sp[sp["phase"] == "bwd_lo"].set_index("step")
    hi = sp[sp["phase"] == "bwd_hi"].set_index("step")
    bwd = lo.assign(phase="backward", t1_s=hi["t1_s"], host_t1_s=hi["host_t1_s"]).reset_index()
    rest = sp[~sp["phase"].isin(["bwd_lo", "bwd_hi"])]
    spans = pd.concat([rest, bwd]).sort_values(["step", "t0_s"])
    spans.to_csv(d / "spans.csv", index=False)
    truth = dict(run.true_energy_j)
    truth["backward"] = truth.pop("bwd_lo") + truth.pop("bwd_hi")
    return truth


@pytest.fixture(scope="module")
def uneven_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("uneven")
    return d, _uneven_dir(d, 0)


def test_the_bin_length_check_puts_the_short_phases_inside_their_intervals(tmp_path):
    # Seeds where, before the check, the optimizer or the EMA missed its interval: a bin
    # straddling the backward's power step biases them in a way the bootstrap cannot see.
    missed = 0
    for seed in (2, 6, 11):
        d = tmp_path / str(seed)
        d.mkdir()
        truth = _uneven_dir(d, seed)
        plain = attribute(d, "regression", None, 0, bin_resolution_check=False).devices[0]
        checked = attribute(d, "regression", None, 0).devices[0]
        for name in ("optimizer", "ema"):
            p = next(r for r in plain.phases if r.phase == name)
            missed += not (p.energy_lo_j <= truth[name] <= p.energy_hi_j)
            c = next(r for r in checked.phases if r.phase == name)
            assert c.energy_j == pytest.approx(p.energy_j)  # the estimate stays
            assert c.energy_lo_j <= truth[name] <= c.energy_hi_j, (seed, name)
            assert "bins of 25 ms move it" in c.note
        assert "length_check" in checked.diagnostics["bins"]
    assert missed >= 3


def _errors(res, truth):
    return {
        p.phase: (p, p.energy_j / truth[p.phase] - 1)
        for p in res.phases
        if p.resolved and p.phase in truth
    }


def test_bins_are_chosen_for_an_uneven_phase_and_put_its_neighbours_back(uneven_run):
    d, truth = uneven_run
    whole = attribute(d, "regression", None, 0, bins=False).devices[0]
    auto = attribute(d, "regression", None, 0).devices[0]
    choice = auto.diagnostics["bins_choice"]
    assert choice["chosen"]
    assert choice["residual_rms_w"]["binned"] < 0.5 * choice["residual_rms_w"]["whole"]
    assert auto.diagnostics["bins"]["members"]["backward"][0] == "backward#1"
    # One power for the whole backward books it 7 % low and leaves the optimizer unphysical.
    e_whole = _errors(whole, truth)
    assert e_whole["backward"][1] < -0.05
    assert "optimizer" not in e_whole
    # Its bins find the power rising through it; backward and forward within 1 %, the
    # optimizer within 5 % and inside its interval.
    e = _errors(auto, truth)
    assert abs(e["backward"][1]) < 0.01 and abs(e["forward"][1]) < 0.01
    opt, err = e["optimizer"]
    assert abs(err) < 0.05 and opt.energy_lo_j <= truth["optimizer"] <= opt.energy_hi_j
    bins_j = auto.diagnostics["bins"]["energy_per_step_j"]
    first = sum(bins_j[f"backward#{i}"] for i in range(1, 5))
    last = sum(bins_j[f"backward#{i}"] for i in range(5, 9))
    assert last > 1.5 * first  # 680 W against 380 W
    assert sum(bins_j[b] for b in auto.diagnostics["bins"]["members"]["backward"]) == (
        pytest.approx(next(p.energy_j for p in auto.phases if p.phase == "backward") / 500, 0.05)
    )


RUN6 = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "attr_vith_b8" / "run6"


@pytest.mark.skipif(not (RUN6 / "samples.csv").is_file(), reason="committed H200 run absent")
def test_run6_power_readings_are_placed_on_a_grid_fitted_in_pieces():
    # The H200's run6: one power-field grid for 366 s fitted with 30 ms of jitter, so almost
    # none of their readings could enter the fit, and the result says so. Fitted in 60 s
    # pieces (the default), each piece's jitter is 6–11 ms and the readings are used.
    kw = {"bins": False, "stall_model": False, "use_buffer": False}  # the instant rows alone
    one = attribute(RUN6, "regression", None, 0, power_piece_s=None, **kw).devices[0]
    assert one.diagnostics["rows"]["power_instant"]["n_rows"] < 50
    assert any("rests on the counter" in n for n in one.notes)
    pieces = attribute(RUN6, "regression", None, 0, **kw).devices[0]
    assert pieces.diagnostics["rows"]["power_instant"]["n_rows"] > 2000
    assert len(pieces.diagnostics["power_pieces"]) == 6
    assert any("fitted in 6 pieces" in n for n in pieces.notes)
    assert not any("rests on the counter" in n for n in pieces.notes)
