"""Factorial analysis of variance of a study's cells (statsmodels), with partial η².

`factorial_anova(df, response, factors)` fits an ordinary least-squares model with every factor
categorical and every interaction up to `max_order`, and returns the ANOVA table (type II sums of
squares by default; in a balanced design types I, II and III agree) with each term's partial
η² = SS_term / (SS_term + SS_residual): the share of the variance left after the other terms
that this term explains. Pure: data in, table out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

RESIDUAL = "Residual"


@dataclass(frozen=True)
class AnovaResult:
    """An ANOVA table and what it was fitted on."""

    response: str
    factors: tuple[str, ...]
    table: object
    """pandas DataFrame indexed by term ("arch", "arch:dataset", ..., "Residual") with columns
    df, sum_sq, mean_sq, F, p, partial_eta2."""
    n: int
    """Cells (rows) used."""
    dropped: int
    """Rows left out because the response was missing (None/NaN)."""
    typ: int
    max_order: int

    def to_json(self) -> dict:
        rows = []
        for term, r in self.table.iterrows():  # type: ignore[attr-defined]
            rows.append(
                {"term": term, **{k: (None if _nan(v) else float(v)) for k, v in r.items()}}
            )
        return {
            "response": self.response,
            "factors": list(self.factors),
            "n": self.n,
            "dropped": self.dropped,
            "typ": self.typ,
            "max_order": self.max_order,
            "terms": rows,
        }


def _nan(v) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def _term(factors: Sequence[str]) -> str:
    return ":".join(f'C(Q("{f}"))' for f in factors)


def factorial_anova(
    df, response: str, factors: Sequence[str], *, max_order: int = 2, typ: int = 2
) -> AnovaResult:
    """The factorial ANOVA of `response` on `factors` (columns of the DataFrame `df`).

    Args:
        df: one row per cell.
        response: the measured column.
        factors: the factor columns (treated as categorical).
        max_order: highest interaction order fitted (2: main effects and pairwise interactions;
            len(factors): the full factorial).
        typ: type of the sums of squares (1, 2 or 3).

    Raises:
        ValueError: a column is missing, a factor has a single level, or too few rows are left
            to estimate the residual (replicate cells, e.g. more seeds, or lower max_order).
    """
    import pandas as pd
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    factors = tuple(factors)
    missing = [c for c in (response, *factors) if c not in df.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {list(df.columns)}")
    if typ not in (1, 2, 3):
        raise ValueError(f"typ must be 1, 2 or 3, got {typ}")
    if not 1 <= max_order <= len(factors):
        raise ValueError(f"max_order must be in 1..{len(factors)}, got {max_order}")
    d = df[[response, *factors]].copy()
    d[response] = pd.to_numeric(d[response], errors="coerce")
    before = len(d)
    d = d.dropna(subset=[response])
    single = [f for f in factors if d[f].nunique() < 2]
    if single:
        raise ValueError(f"factor(s) {single} have a single level among the rows with {response}")
    for f in factors:
        d[f] = d[f].astype(str)
    terms = [
        _term(combo)
        for order in range(1, max_order + 1)
        for combo in itertools.combinations(factors, order)
    ]
    formula = f'Q("{response}") ~ ' + " + ".join(terms)
    if typ == 3:  # type III needs sum-to-zero contrasts to mean what it says
        formula = formula.replace('"))', '"), Sum)')
    fit = smf.ols(formula, data=d).fit()
    if fit.df_resid < 1:
        raise ValueError(
            f"no residual degrees of freedom for {response} ({len(d)} rows, {int(fit.df_model)} "
            "model terms): replicate the cells (more seeds) or lower max_order"
        )
    table = sm.stats.anova_lm(fit, typ=typ)
    if "Intercept" in table.index:
        table = table.drop(index="Intercept")
    table = table.rename(columns={"PR(>F)": "p"})
    table.index = [_plain(t) for t in table.index]
    table["mean_sq"] = table["sum_sq"] / table["df"]
    ss_res = float(table.loc[RESIDUAL, "sum_sq"])
    table["partial_eta2"] = table["sum_sq"] / (table["sum_sq"] + ss_res)
    table.loc[RESIDUAL, "partial_eta2"] = float("nan")
    table = table[["df", "sum_sq", "mean_sq", "F", "p", "partial_eta2"]]
    return AnovaResult(response, factors, table, len(d), before - len(d), typ, max_order)


def _plain(term: str) -> str:
    """'C(Q("arch")):C(Q("dataset"))' → 'arch:dataset'."""
    if term == "Residual":
        return RESIDUAL
    parts = []
    for p in term.split(":"):
        name = p
        if 'Q("' in p:
            name = p[p.index('Q("') + 3 : p.index('")')]
        parts.append(name)
    return ":".join(parts)
