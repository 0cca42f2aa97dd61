"""The highest power a phase may be fitted at before it is called unphysical."""

from __future__ import annotations

import pandas as pd
import pytest

from jouleprof.attribution.common import build_timeline
from jouleprof.attribution.regression_results import CEILING_MARGIN, _power_ceiling_w


def _timeline():
    spans = pd.DataFrame(
        [(s, "step", 1.0 + s, 1.9 + s) for s in range(4)], columns=["step", "phase", "t0_s", "t1_s"]
    )
    return build_timeline(spans, 0.0, 6.0, warmup_steps=1)


def test_the_ceiling_counts_the_power_buffer_where_one_was_recorded():
    tl = _timeline()  # analysed region: steps 1-3, [2.0, 4.9] s
    dev = pd.DataFrame(
        {"t_s": [0.5, 2.5, 3.5, 5.5], "power_instant_w": [900.0, 600.0, 650.0, 990.0]}
    )
    # only readings inside the analysed region count (not the 900 W and 990 W outside it)
    assert _power_ceiling_w(dev, tl) == pytest.approx(CEILING_MARGIN * 650.0)
    # an H200 draws above its limit for tens of ms: the buffer, sampled every ~20 ms, sees it
    buffer = pd.DataFrame({"t_s": [2.2, 3.1, 5.2], "power_w": [640.0, 901.0, 999.0]})
    assert _power_ceiling_w(dev, tl, buffer) == pytest.approx(CEILING_MARGIN * 901.0)
    # no power field read: no ceiling
    assert _power_ceiling_w(dev[["t_s"]], tl) is None
