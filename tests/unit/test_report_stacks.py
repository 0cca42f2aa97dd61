"""Stacked phase-energy bars add up to a step: joint regression rows are never counted twice."""

from __future__ import annotations

import numpy as np
import pandas as pd

from jouleprof.report.studyfigures import _additive


def test_a_joint_row_stands_for_its_members_only_where_none_is_resolved():
    piv = pd.DataFrame(
        {
            "forward": [10.0, 10.0, 10.0],
            "optimizer": [np.nan, 2.0, np.nan],
            "ema": [np.nan, np.nan, np.nan],
            "optimizer+ema": [3.0, 3.5, np.nan],
        },
        index=[1, 2, 4],
    )
    out, left_out = _additive(piv)
    # bs1: both members unresolved, the joint row stands for them: nothing left out.
    assert out.loc[1, "optimizer+ema"] == 3.0 and left_out[0] == 0
    # bs2: the optimizer is resolved, so stacking the joint row would count it twice.
    assert np.isnan(out.loc[2, "optimizer+ema"]) and out.loc[2, "optimizer"] == 2.0
    assert left_out[1] == 1  # the EMA alone is missing
    # bs4: no joint row and neither member: two phases left out, the joint one is no gap.
    assert left_out[2] == 2
    assert piv.loc[2, "optimizer+ema"] == 3.5  # the input is not modified


def test_a_phase_keeps_its_color_whatever_else_a_figure_shows():
    from jouleprof.report.figures import phase_colors

    a = phase_colors(["backward", "forward/target"])
    b = phase_colors(["data", "forward/target", "my_phase", "backward", "another"])
    assert a["backward"] == b["backward"] and a["forward/target"] == b["forward/target"]
    assert len({b[n] for n in b}) == len(b)  # distinct colors within a figure
