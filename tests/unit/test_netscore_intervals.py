"""NetScore variants carry the intervals of their inputs."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jouleprof.scores import netscore as ns
from jouleprof.scores.intervals import (
    Bounded,
    all_scores,
    as_figure,
    overlap,
    score_with_intervals,
    wilson_pct,
)
from jouleprof.types import Figure, Source


def test_point_inputs_give_the_plain_scores_and_a_zero_width_interval():
    s = score_with_intervals(
        "ns_hash", 95.0, None, {"memory_mib": 617, "time_s": 0.02, "power_w": 180}
    )
    want = ns.ns_hash(95.0, 617, 0.02, 180)
    assert s["value"] == pytest.approx(want) and s["lo"] == s["hi"] == pytest.approx(want)
    assert "lo_acc" not in s


def test_interval_is_the_extreme_corners():
    power = Figure.measured(180.0, "W", lo=170.0, hi=195.0)
    t = Bounded(0.02, 0.019, 0.022)
    s = score_with_intervals(
        "ns_hash", 90.0, None, {"memory_mib": 600, "time_s": t, "power_w": power}
    )
    corners = [
        ns.ns_hash(90.0, 600, tt, pp) for tt, pp in itertools.product((0.019, 0.022), (170, 195))
    ]
    assert s["lo"] == pytest.approx(min(corners)) and s["hi"] == pytest.approx(max(corners))
    assert s["lo"] < s["value"] < s["hi"]
    assert s["inputs"]["power_w"] == {
        "value": 180.0,
        "lo": 170.0,
        "hi": 195.0,
        "source": "measured",
    }


@settings(max_examples=60, deadline=None)
@given(
    a=st.floats(5, 100),
    r=st.floats(10, 1e5),
    t=st.floats(1e-4, 10),
    p=st.floats(5, 900),
    w=st.floats(0.0, 0.3),
    u=st.floats(0, 1),
    v=st.floats(0, 1),
)
def test_any_point_inside_the_box_scores_inside_the_interval(a, r, t, p, w, u, v):
    tb = Bounded(t, t * (1 - w), t * (1 + w))
    pb = Bounded(p, p * (1 - w / 2), p * (1 + w))
    s = score_with_intervals("ns_hash", a, None, {"memory_mib": r, "time_s": tb, "power_w": pb})
    inner = ns.ns_hash(a, r, tb.lo + u * (tb.hi - tb.lo), pb.lo + v * (pb.hi - pb.lo))
    assert s["lo"] - 1e-9 <= inner <= s["hi"] + 1e-9


def test_accuracy_sampling_widens_the_interval_and_shrinks_with_more_clips():
    inputs = {"memory_mib": 600, "time_s": 0.02, "power_w": Bounded(180, 175, 185)}
    small = score_with_intervals("ns_hash", 90.0, 100, inputs)
    large = score_with_intervals("ns_hash", 90.0, 10_000, inputs)
    for s in (small, large):
        assert s["lo_acc"] < s["lo"] <= s["hi"] < s["hi_acc"]
    assert (small["hi_acc"] - small["lo_acc"]) > (large["hi_acc"] - large["lo_acc"])
    lo, hi = wilson_pct(90, 100)
    assert 82 < lo < 90 < hi < 95


def test_missing_or_simulated_inputs_are_said():
    s = all_scores(80.0, 50, {"memory_mib": 600, "time_s": None, "power_w": 100})
    assert s["ns_m"]["value"] is not None
    assert s["ns_e"]["value"] is None and "time_s" in s["ns_e"]["reason"]
    assert as_figure(s["ns_hash"]).source is Source.UNAVAILABLE
    sim = Figure.estimated(100.0, "W", "simulated GPU (no real sensor)", lo=95.0, hi=105.0)
    s2 = score_with_intervals("ns_e", 80.0, None, {"time_s": 0.01, "power_w": sim})
    assert s2["source"] == "simulated"
    assert as_figure(s2).source is Source.ESTIMATED
    bad = score_with_intervals("ns_e", 80.0, None, {"time_s": 0.01, "power_w": Bounded(5, 0, 9)})
    assert bad["value"] is None and "positive" in bad["reason"]
    assert all_scores(None, None, {})["ns_hash"]["value"] is None


def test_overlap_says_whether_a_difference_is_inside_the_uncertainty():
    a = {"lo": 60.0, "hi": 61.0}
    assert overlap(a, {"lo": 60.9, "hi": 62.0}) and not overlap(a, {"lo": 61.1, "hi": 62.0})
    assert not overlap(a, {"value": None})


def test_netscore_uses_params_and_macs():
    s = score_with_intervals("netscore", 80.0, None, {"params_m": 86.0, "macs_g": 180.0})
    assert math.isclose(s["value"], ns.netscore(80.0, 86.0, 180.0))
