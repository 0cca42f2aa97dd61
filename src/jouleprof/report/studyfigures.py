"""Report figures of a study (PNG): the batch-size effect, phases per batch size, timelines of
one representative cell per batch size, overhead, agreement between modes, efficiency.

Inputs are the study tables' numeric frames (`report.studytables`); a missing mean is never
drawn as zero: its batch size is marked "unavailable" on the axis instead.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from jouleprof.report.figures import (
    Plot,
    colors,
    downsample,
    mark_unavailable,
    new_figure,
    phase_colors,
    save,
)

log = logging.getLogger(__name__)


def _bs_axis(ax, batch_sizes: list[int]) -> None:
    """Batch sizes on a log2 axis, each labelled."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes, [str(b) for b in batch_sizes])
    ax.minorticks_off()
    ax.set_xlabel("batch size")


def _finish_bs_axes(fig, axes_row, batch_sizes: list[int], fig_title: str, **legend_kw) -> None:
    """Batch-size axes, legends where something is labelled, and the figure title."""
    for ax in axes_row:
        _bs_axis(ax, batch_sizes)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, **legend_kw)
    fig.suptitle(fig_title, fontsize=10)


def _mode_lines(
    ax, agg: pd.DataFrame, metric: str, modes: list[str], bss: list[int], scale: float = 1.0
) -> list[str]:
    """mean ± sd per mode vs batch size; returns 'mode bs' of the points left out."""
    col = colors(modes)
    gone = []
    for k, mode in enumerate(modes):
        g = agg[(agg["metric"] == metric) & (agg["mode"] == mode)].set_index("batch_size")
        if not len(g) or not (g["n"] > 0).any():
            continue
        have = g[g["n"] > 0]
        # Modes side by side around each batch size so error bars do not hide each other.
        x = have.index.to_numpy(float) * 2 ** ((k - (len(modes) - 1) / 2) * 0.04)
        ax.errorbar(
            x,
            scale * have["mean"],
            yerr=scale * have["sd"].fillna(0),
            marker="o",
            ms=4,
            capsize=3,
            color=col[mode],
            label=mode,
        )
        gone += [f"{mode} {b}" for b in g.index[g["n"] == 0]]
    present = set(agg.loc[(agg["metric"] == metric) & (agg["n"] > 0), "batch_size"])
    for b in bss:
        if b not in present:
            mark_unavailable(ax, b)
    return gone


def batch_effect_plot(agg: pd.DataFrame, modes: list[str], bss: list[int], out: Path) -> Plot:
    """Throughput and GPU energy per 1,000 samples vs batch size, mean ± sd per mode."""
    name, title = "batch_size_effect", "Throughput and energy per 1,000 samples vs batch size"
    fig, axes = new_figure(1, 2, 11, 4.0)
    g1 = _mode_lines(axes[0, 0], agg, "throughput_samples_per_s", modes, bss)
    axes[0, 0].set_ylabel("throughput (samples/s)")
    g2 = _mode_lines(axes[0, 1], agg, "energy_per_1000_samples_kwh", modes, bss)
    axes[0, 1].set_ylabel("GPU energy per 1,000 samples (kWh)")
    _finish_bs_axes(fig, axes[0], bss, title, title="mode", title_fontsize=8)
    gone = sorted(set(g1 + g2))
    return Plot(
        name,
        title,
        save(fig, out, name),
        caption="Measured; mean ± sd over the complete repetitions. Baseline has no "
        "energy (its sensors are off). "
        + (f"Not drawn (unavailable, see the tables): {', '.join(gone)}." if gone else ""),
    )


def phase_time_by_batch_plot(times: pd.DataFrame, out: Path) -> Plot:
    """Stacked exclusive phase time per step, per batch size."""
    name, title = "phase_time_by_batch", "Phase time per step vs batch size"
    piv = times.pivot_table(
        index="batch_size", columns="phase", values="time_per_step_s", sort=False
    )
    return _stacked(
        piv * 1e3,
        "time per step (ms)",
        name,
        title,
        out,
        "Measured from spans.csv of the fine cells, exclusive times (they add up to "
        "the step), mean over repetitions.",
    )


def _stacked(
    piv: pd.DataFrame,
    ylabel: str,
    name: str,
    title: str,
    out: Path,
    caption: str,
    ax=None,
    fig=None,
    col: dict | None = None,
) -> Plot:
    own = ax is None
    if own:
        fig, axes = new_figure(1, 1, 8, 4.0)
        ax = axes[0, 0]
    piv, gaps = _additive(piv)
    col = col or phase_colors(list(piv.columns))
    x = np.arange(len(piv.index))
    bottom = np.zeros(len(x))
    for ph in piv.columns:
        v = piv[ph].to_numpy(float)
        ok = ~np.isnan(v)
        if not ok.any():
            continue  # never resolved here: no bar, no legend entry
        ax.bar(x[ok], v[ok], 0.6, bottom=bottom[ok], color=col[ph], label=ph)
        bottom[ok] += v[ok]
    if len(bottom) and np.nanmax(bottom) > 0:
        ax.set_ylim(0, 1.15 * np.nanmax(bottom))
    for xi, top, k in zip(x, bottom, gaps, strict=True):
        if k:  # a partial stack must not read as a smaller total
            ax.annotate(
                f"{k} unres.",
                (xi, top),
                ha="center",
                va="bottom",
                fontsize=6,
                color="#b03030",
            )
    ax.set_xticks(x, [str(b) for b in piv.index])
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if not own:
        return Plot(name, title)
    fig.suptitle(title, fontsize=10)
    return Plot(name, title, save(fig, out, name), caption=caption)


def _additive(piv: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The columns that add up to a step, and per row how many phases are left out.

    A joint row "a+b" (regression: two phases weighed only together) stands for its members
    where none of them is resolved; where one is, stacking it too would count that phase
    twice, so the joint value is dropped there. A phase a joint row stands for is not counted
    as left out.
    """
    piv = piv.copy()
    covered = pd.DataFrame(False, index=piv.index, columns=piv.columns)
    for c in [c for c in piv.columns if "+" in c]:
        members = [m for m in c.split("+") if m in piv.columns]
        clash = piv[members].notna().any(axis=1) if members else False
        piv.loc[clash, c] = np.nan
        for m in members:
            covered[m] |= piv[c].notna()
    missing = piv.isna() & ~covered
    joint = [c for c in piv.columns if "+" in c]
    missing[joint] = False  # a joint row absent where its members are resolved is no gap
    return piv, missing.sum(axis=1).to_numpy()


def phase_energy_by_batch_plot(energy: pd.DataFrame, out: Path) -> Plot:
    """Per method, stacked phase energy per sample per batch size; proportional vs regression."""
    name, title = "phase_energy_by_batch", "Phase energy per sample vs batch size, by method"
    methods = list(dict.fromkeys(energy["method"]))
    compare = {"proportional", "regression"} <= set(methods)
    fig, axes = new_figure(1, len(methods) + int(compare), 5.0 * (len(methods) + compare), 4.2)
    unresolved = []
    col = phase_colors(list(dict.fromkeys(energy["phase"])))  # one color per phase, every panel
    for ax, m in zip(axes[0], methods, strict=False):
        g = energy[energy["method"] == m]
        piv = g.pivot_table(
            index="batch_size",
            columns="phase",
            values="energy_per_sample_j",
            sort=False,
            dropna=False,
        )
        _stacked(piv, "energy per sample (J)", name, title, out, "", ax=ax, fig=fig, col=col)
        ax.set_title(m, fontsize=9)
        unresolved += [
            f"{m}: {r.phase} at {r.batch_size}" for r in g.itertuples() if r.n_resolved == 0
        ]
    if compare:
        ax = axes[0, -1]
        p = energy[energy["method"] == "proportional"].set_index(["batch_size", "phase"])
        r = energy[energy["method"] == "regression"].set_index(["batch_size", "phase"])
        diff = (
            (100 * (p["energy_per_sample_j"] - r["energy_per_sample_j"]) / r["energy_per_sample_j"])
            .dropna()
            .unstack("batch_size")
        )
        diff = diff.reindex([p for p in dict.fromkeys(energy["phase"]) if p in diff.index])
        bss = list(diff.columns)
        w = 0.8 / max(len(bss), 1)
        xs = np.arange(len(diff.index))
        for k, (b, c) in enumerate(colors([str(b) for b in bss]).items()):
            ax.bar(xs + (k - (len(bss) - 1) / 2) * w, diff[int(b)], w, color=c, label=f"bs {b}")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(xs, list(diff.index), rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("proportional − regression (% of regression)")
        ax.set_title("how far the time-share split is off", fontsize=9)
        if bss:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    cap = (
        "From each fine cell's attribution, mean over repetitions. Unresolved phases are left "
        "out of the stacks, not drawn as 0" + (f": {'; '.join(unresolved)}." if unresolved else ".")
    )
    return Plot(name, title, save(fig, out, name), caption=cap)


def timelines_by_batch_plot(series: dict[int, tuple[str, pd.DataFrame]], out: Path) -> Plot:
    """Power, utilization and memory of one representative cell per batch size (first GPU).

    Args:
        series: batch size → (cell id, its samples with t_s relative to the measured segment).
    """
    name, title = "timelines_by_batch", "Telemetry of one representative cell per batch size"
    fig, axes = new_figure(3, 1, 10, 8.0, sharex=True)
    col = colors([str(b) for b in series])
    for bs, (cid, s) in series.items():
        gpus = sorted(d for d in s["device"].astype(str).unique() if d.startswith("gpu"))
        d = s[s["device"] == (gpus[0] if gpus else s["device"].iloc[0])]
        for ax, c, scale in zip(
            axes[:, 0],
            ("power_instant_w", "util_pct", "mem_used_bytes"),
            (1.0, 1.0, 2.0**-30),
            strict=True,
        ):
            c = "power_w" if c == "power_instant_w" and d[c].isna().all() else c
            v = d[["t_s", c]].dropna()
            if len(v):
                t, y = downsample(v["t_s"].to_numpy(float), v[c].to_numpy(float) * scale)
                ax.plot(t, y, lw=0.8, color=col[str(bs)], label=f"bs {bs} ({cid})")
    for ax, lab in zip(
        axes[:, 0], ("power (W)", "utilization (%)", "memory used (GiB)"), strict=True
    ):
        ax.set_ylabel(lab)
        ax.axvline(0, color="k", lw=0.6, ls=":")
    axes[0, 0].legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("time since the measured segment began (s)")
    fig.suptitle(title, fontsize=10)
    return Plot(
        name,
        title,
        save(fig, out, name),
        caption="Measured (samples.csv of each cell, first GPU; instant power where "
        "read). The cell per batch size is the one whose throughput is nearest its "
        "group's median, fine mode preferred.",
    )


def overhead_plot(ov: pd.DataFrame, bss: list[int], out: Path) -> Plot:
    """Throughput ratio to baseline per mode, and fine mode's interleaved overhead."""
    name, title = "overhead", "Overhead of the measurement modes"
    fig, axes = new_figure(1, 2, 11, 3.8)
    across = ov[ov["comparison"].str.startswith("throughput")]
    modes = list(dict.fromkeys(across["mode"]))
    col = colors(modes)
    for k, m in enumerate(modes):
        g = across[(across["mode"] == m) & across["ratio"].notna()]
        x = g["batch_size"].to_numpy(float) * 2 ** ((k - (len(modes) - 1) / 2) * 0.04)
        axes[0, 0].errorbar(
            x,
            g["ratio"],
            yerr=g["ratio_sd"].fillna(0),
            marker="o",
            ms=4,
            capsize=3,
            color=col[m],
            label=m,
        )
    axes[0, 0].axhline(1.0, color="k", lw=0.8)
    axes[0, 0].set_ylabel("throughput / baseline throughput")
    inter = ov[~ov["comparison"].str.startswith("throughput") & ov["overhead_pct"].notna()]
    if len(inter):
        lo = (inter["overhead_pct"] - inter["ci_lo_pct"]).clip(lower=0).fillna(0)
        hi = (inter["ci_hi_pct"] - inter["overhead_pct"]).clip(lower=0).fillna(0)
        axes[0, 1].errorbar(
            inter["batch_size"],
            inter["overhead_pct"],
            yerr=[lo, hi],
            marker="s",
            capsize=3,
            color="#c07a10",
            label="fine (interleaved)",
        )
    axes[0, 1].axhline(0.0, color="k", lw=0.8)
    axes[0, 1].set_ylabel("recorder overhead (% of step time)")
    _finish_bs_axes(fig, axes[0], bss, title)
    return Plot(
        name,
        title,
        save(fig, out, name),
        caption="Left: across runs, error bars ± sd of the ratio (both modes' spread). "
        "Right: fine mode's recorder on vs off in interleaved blocks of one process; "
        "error bars span the cells' 95% intervals.",
    )


def agreement_plot(agr: pd.DataFrame, out: Path) -> Plot:
    """Energy per sample of each mode per batch size (bars, sd error bars)."""
    name, title = "energy_agreement", "End-to-end GPU energy per sample, by mode"
    modes = list(dict.fromkeys(agr["mode"]))
    bss = sorted(agr["batch_size"].unique())
    fig, axes = new_figure(1, 1, 9, 3.8)
    ax = axes[0, 0]
    w = 0.8 / max(len(modes), 1)
    col = colors(modes)
    for k, m in enumerate(modes):
        g = agr[agr["mode"] == m].set_index("batch_size")
        for i, b in enumerate(bss):
            x = i + (k - (len(modes) - 1) / 2) * w
            if b not in g.index or not g.loc[b, "n"]:
                mark_unavailable(ax, x)
                continue
            ax.bar(
                x,
                g.loc[b, "mean_j"],
                w,
                yerr=0 if pd.isna(g.loc[b, "sd_j"]) else g.loc[b, "sd_j"],
                capsize=3,
                color=col[m],
                label=m if i == 0 else None,
            )
    ax.set_xticks(range(len(bss)), [str(b) for b in bss])
    ax.set_xlabel("batch size")
    ax.set_ylabel("GPU energy per sample (J)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return Plot(
        name,
        title,
        save(fig, out, name),
        caption="Measured: e2e and fine by jouleprof's counter reads, codecarbon and zeus "
        "by those tools; mean ± sd over repetitions.",
    )


def efficiency_plot(agg: pd.DataFrame, modes: list[str], bss: list[int], out: Path) -> Plot:
    """MFU, and joules per sample next to the physical floor, vs batch size."""
    name, title = "efficiency", "Efficiency against the physical limit"
    fig, axes = new_figure(1, 2, 11, 3.8)
    _mode_lines(axes[0, 0], agg, "mfu_pct", modes, bss)
    axes[0, 0].set_ylabel("MFU (%) — estimated")
    _mode_lines(axes[0, 1], agg, "energy_per_sample_j", modes, bss)
    fl = agg[(agg["metric"] == "floor_energy_per_sample_j") & (agg["n"] > 0)]
    fl = fl.groupby("batch_size")["mean"].mean()
    if len(fl):
        axes[0, 1].plot(fl.index, fl.to_numpy(), "k--", lw=1, label="floor (FLOPs / 1.13 TFLOP/J)")
    axes[0, 1].set_yscale("log")
    axes[0, 1].set_ylabel("GPU energy per sample (J)")
    _finish_bs_axes(fig, axes[0], bss, title)
    return Plot(
        name,
        title,
        save(fig, out, name),
        caption="MFU and the floor are estimated from counted FLOPs; energy is measured.",
    )
