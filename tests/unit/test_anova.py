"""factorial_anova reproduces a published two-way ANOVA.

The data are the battery-life experiment of D. C. Montgomery, *Design and Analysis of
Experiments* (Wiley), Example 5.1 ("The Battery Design Experiment"; Table 5.1 data, Table 5.5
ANOVA): 3 plate materials × 3 temperatures (15, 70, 125 °F), 4 batteries each, life in hours.
The book's ANOVA: material SS 10,683.72 (2 df, F = 7.91), temperature SS 39,118.72 (2 df,
F = 28.97), interaction SS 9,613.78 (4 df, F = 3.56), error SS 18,230.75 (27 df), total
77,646.97 (35 df).
"""

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("statsmodels")

from jouleprof.analysis.anova import factorial_anova  # noqa: E402

LIFE = {  # material → temperature → four lives (h)
    1: {15: (130, 155, 74, 180), 70: (34, 40, 80, 75), 125: (20, 70, 82, 58)},
    2: {15: (150, 188, 159, 126), 70: (136, 122, 106, 115), 125: (25, 70, 58, 45)},
    3: {15: (138, 110, 168, 160), 70: (174, 120, 150, 139), 125: (96, 104, 82, 60)},
}


def battery():
    rows = [
        {"material": m, "temperature": t, "life_h": v}
        for m, by_t in LIFE.items()
        for t, lives in by_t.items()
        for v in lives
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("typ", [1, 2, 3])
def test_reproduces_montgomery_example_5_1(typ):
    r = factorial_anova(battery(), "life_h", ["material", "temperature"], typ=typ)
    t = r.table
    assert r.n == 36
    assert t.loc["material", "sum_sq"] == pytest.approx(10683.72, abs=0.01)
    assert t.loc["temperature", "sum_sq"] == pytest.approx(39118.72, abs=0.01)
    assert t.loc["material:temperature", "sum_sq"] == pytest.approx(9613.78, abs=0.01)
    assert t.loc["Residual", "sum_sq"] == pytest.approx(18230.75, abs=0.01)
    assert t["sum_sq"].sum() == pytest.approx(77646.97, abs=0.02)
    assert list(t["df"]) == [2, 2, 4, 27]
    assert t.loc["material", "F"] == pytest.approx(7.91, abs=0.005)
    assert t.loc["temperature", "F"] == pytest.approx(28.97, abs=0.005)
    assert t.loc["material:temperature", "F"] == pytest.approx(3.56, abs=0.005)
    # the book's P-values: 0.0020, < 0.0001, 0.0186
    assert t.loc["material", "p"] == pytest.approx(0.0020, abs=5e-5)
    assert t.loc["temperature", "p"] < 1e-4
    assert t.loc["material:temperature", "p"] == pytest.approx(0.0186, abs=5e-5)
    # partial η² = SS / (SS + SS_error)
    assert t.loc["material", "partial_eta2"] == pytest.approx(10683.72 / (10683.72 + 18230.75))


def test_main_effects_only_pools_the_interaction_into_the_error():
    r = factorial_anova(battery(), "life_h", ["material", "temperature"], max_order=1)
    assert r.table.loc["Residual", "df"] == 31
    assert r.table.loc["Residual", "sum_sq"] == pytest.approx(18230.75 + 9613.78, abs=0.02)
    j = r.to_json()
    assert [t["term"] for t in j["terms"]] == ["material", "temperature", "Residual"]
    assert j["terms"][-1]["F"] is None


def test_missing_responses_are_dropped_and_counted():
    df = battery()
    df.loc[0, "life_h"] = None
    r = factorial_anova(df, "life_h", ["material", "temperature"])
    assert (r.n, r.dropped) == (35, 1)


def test_refuses_what_it_cannot_fit():
    df = battery()
    with pytest.raises(ValueError, match="not in the table"):
        factorial_anova(df, "hours", ["material"])
    with pytest.raises(ValueError, match="single level"):
        factorial_anova(df[df.material == 1], "life_h", ["material", "temperature"])
    one_each = df.groupby(["material", "temperature"]).head(1)
    with pytest.raises(ValueError, match="more seeds"):
        factorial_anova(one_each, "life_h", ["material", "temperature"])
