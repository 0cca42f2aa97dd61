import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jouleprof.scores.netscore import NetScoreInputs, netscore, ns_e, ns_hash, ns_m, scores


def test_formulas_by_hand():
    # A = 80 %, P = 4 M, M = 1 GMAC: 20·log10(6400 / (2 · 1)) = 20·log10(3200)
    assert netscore(80, 4, 1) == pytest.approx(20 * math.log10(3200))
    assert ns_m(80, 256) == pytest.approx(20 * math.log10(6400 / 256**0.125))
    assert ns_e(80, 1.0, 1.0) == pytest.approx(20 * math.log10(6400))
    assert ns_hash(80, 1.0, 1.0, 1.0) == pytest.approx(20 * math.log10(6400))


@given(st.floats(1, 100), st.floats(1e-3, 1e5), st.floats(1e-3, 1e4), st.floats(1e-3, 1e3))
def test_ns_hash_is_the_sum_of_its_parts(a, r, t, p):
    # log of a product: NS# = NS_E + NS_M − 20·log10(A²)
    lhs = ns_hash(a, r, t, p)
    rhs = ns_e(a, t, p) + ns_m(a, r) - 20 * math.log10(a**2)
    assert lhs == pytest.approx(rhs, abs=1e-9)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_non_positive_inputs_are_refused(bad):
    with pytest.raises(ValueError, match="positive"):
        ns_m(90, bad)


def test_scores_picks_what_inputs_allow():
    assert set(scores(NetScoreInputs(90, memory_mib=100))) == {"ns_m"}
    with pytest.raises(ValueError, match="both"):
        scores(NetScoreInputs(90, params_m=3))
    with pytest.raises(ValueError, match="no score"):
        scores(NetScoreInputs(90))
    with pytest.raises(ValueError, match="percentage"):
        scores(NetScoreInputs(150, memory_mib=3))
