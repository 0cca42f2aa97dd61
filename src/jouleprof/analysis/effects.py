"""Effects of a factorial study's factors: cell means with intervals, rank correlations, ratios
between two levels, and effect plots (matplotlib). Pure functions of a table of cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def t_quantile(df: float, level: float = 0.95) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df)) if df > 0 else math.inf


def level_means(df, response: str, by: Sequence[str], level: float = 0.95):
    """Mean, standard deviation, n and a t interval of `response` for every combination of `by`."""
    import numpy as np
    import pandas as pd

    rows = []
    for key, g in df.dropna(subset=[response]).groupby(list(by), sort=True):
        v = g[response].to_numpy(dtype=float)
        n = len(v)
        mean = float(np.mean(v))
        sd = float(np.std(v, ddof=1)) if n > 1 else float("nan")
        half = t_quantile(n - 1, level) * sd / math.sqrt(n) if n > 1 else float("nan")
        key = key if isinstance(key, tuple) else (key,)
        rows.append(
            {
                **dict(zip(by, key, strict=True)),
                "mean": mean,
                "sd": sd,
                "n": n,
                "lo": mean - half,
                "hi": mean + half,
            }
        )
    return pd.DataFrame(rows)


def ratio_of_means(a, b, level: float = 0.95) -> dict[str, float | None]:
    """mean(a) / mean(b) with a delta-method t interval on the log scale (Welch degrees of
    freedom). Needs two or more values in each and positive means; else the interval is None."""
    import numpy as np

    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not len(a) or not len(b) or a.mean() <= 0 or b.mean() <= 0:
        return {"ratio": None, "lo": None, "hi": None, "n_a": len(a), "n_b": len(b)}
    ratio = float(a.mean() / b.mean())
    if len(a) < 2 or len(b) < 2:
        return {"ratio": ratio, "lo": None, "hi": None, "n_a": len(a), "n_b": len(b)}
    va = a.var(ddof=1) / (len(a) * a.mean() ** 2)  # variance of log(mean a), delta method
    vb = b.var(ddof=1) / (len(b) * b.mean() ** 2)
    se = math.sqrt(va + vb)
    if se == 0:
        return {"ratio": ratio, "lo": ratio, "hi": ratio, "n_a": len(a), "n_b": len(b)}
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    q = t_quantile(dof, level)
    return {
        "ratio": ratio,
        "lo": ratio * math.exp(-q * se),
        "hi": ratio * math.exp(q * se),
        "n_a": len(a),
        "n_b": len(b),
    }


def spearman(x, y) -> dict[str, float | int | None]:
    """Spearman's rank correlation of paired values (NaN pairs dropped), with its p-value."""
    import numpy as np
    from scipy import stats

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    n = int(ok.sum())
    if n < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return {"rho": None, "p": None, "n": n}
    r = stats.spearmanr(x[ok], y[ok])
    return {"rho": float(r.statistic), "p": float(r.pvalue), "n": n}


def effect_plot(
    df,
    response: str,
    x: str,
    trace: str | None,
    out: Path,
    *,
    ylabel: str | None = None,
    logy: bool = False,
    panel: str | None = None,
) -> Path:
    """Means of `response` over the levels of `x` (one line per level of `trace`, one panel per
    level of `panel`), with 95 % t intervals; written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted(df[panel].dropna().unique()) if panel else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, pv in zip(axes[0], panels, strict=False):
        sub = df if pv is None else df[df[panel] == pv]
        by = [x] + ([trace] if trace else [])
        m = level_means(sub, response, by)
        if m.empty:
            ax.set_title(f"{panel}={pv}: no data" if panel else "no data")
            continue
        levels = sorted(m[x].unique())
        pos = {v: i for i, v in enumerate(levels)}
        groups = m.groupby(trace) if trace else [(None, m)]
        for name, g in groups:
            g = g.sort_values(x)
            xs = [pos[v] for v in g[x]]
            err = [g["mean"] - g["lo"], g["hi"] - g["mean"]]
            ax.errorbar(
                xs, g["mean"], yerr=err, marker="o", capsize=3, label=str(name) if trace else None
            )
        ax.set_xticks(
            range(len(levels)),
            [f"{v:g}" if isinstance(v, float) else str(v) for v in levels],
            rotation=30,
        )
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel or response)
        if logy:
            ax.set_yscale("log")
        if panel:
            ax.set_title(f"{panel} = {pv}")
        if trace:
            ax.legend(fontsize=7, title=trace, title_fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def scatter_plot(
    df,
    x: str,
    y: str,
    color: str,
    out: Path,
    *,
    logx: bool = True,
    xlabel: str | None = None,
    ylabel: str | None = None,
) -> Path:
    """Each cell as a point (x, y), coloured by `color`; written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    d = df.dropna(subset=[x, y])
    for name, g in d.groupby(color):
        ax.scatter(g[x], g[y], s=14, label=str(name), alpha=0.8)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.legend(fontsize=7, title=color, title_fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)
