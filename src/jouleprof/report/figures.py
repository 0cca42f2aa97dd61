"""Report figures of one run (PNG), and the plotting helpers the study figures share.

matplotlib is imported inside the functions and used through its object API (`Figure` and the
Agg canvas, no pyplot), so importing jouleprof stays light and no global backend is touched.
A figure that cannot be drawn is a `Plot` with no path and the reason; a value that is missing
is never drawn as zero: it is left out and marked "unavailable".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jouleprof.report.tables import read_optional_csv

log = logging.getLogger(__name__)

DPI = 110
MAX_POINTS = 3000
"""Most points drawn per device and signal; longer runs are averaged in time bins."""
ZOOM_STEPS = 6
"""Steps shown with their phases shaded in the zoomed timeline."""
SEGMENT_COLORS = {
    "warm-up": "#bbbbbb",
    "measured": "#cfe8cf",
    "overhead": "#f3dcb5",
    "isolation": "#d9cdee",
}


@dataclass
class Plot:
    """One figure of a report: its PNG, or why it could not be drawn."""

    name: str
    title: str
    path: Path | None = None
    reason: str | None = None
    caption: str = ""


def new_figure(
    nrows: int = 1, ncols: int = 1, width_in: float = 9.0, height_in: float = 3.6, **kw: Any
):
    """A matplotlib Figure (Agg, no pyplot) and its axes array (always 2-D)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def save(fig: Any, out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.savefig(path, dpi=DPI)
    fig.savefig(path.with_suffix(".svg"))  # the same figure as a vector file
    return path


def colors(names: Sequence[str]) -> dict[str, Any]:
    """A stable color per name (tab10, then tab20 for more)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def mark_unavailable(ax: Any, x: float, label: str = "unavailable") -> None:
    """Mark a missing point at the axis' bottom (it is not zero, it is not there)."""
    ax.annotate(
        label,
        (x, 0.02),
        xycoords=("data", "axes fraction"),
        rotation=90,
        ha="center",
        va="bottom",
        fontsize=7,
        color="#b03030",
    )


def downsample(t: np.ndarray, v: np.ndarray, max_points: int = MAX_POINTS):
    """At most `max_points` points: means over equal time bins when there are more."""
    if len(t) <= max_points:
        return t, v
    edges = np.linspace(t[0], t[-1], max_points + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, max_points - 1)
    n = np.bincount(idx, minlength=max_points)
    keep = n > 0
    return (
        np.bincount(idx, t, max_points)[keep] / n[keep],
        np.bincount(idx, v, max_points)[keep] / n[keep],
    )


# -- one run ---------------------------------------------------------------------------------


def _signals(d: pd.DataFrame) -> list[tuple[str, str, list[tuple[str, np.ndarray, np.ndarray]]]]:
    """Panels for one device: (panel title, unit, [(label, t, values)]), only signals read."""
    out = []
    t_all = d["t_s"].to_numpy(float)
    power = []
    for col, label in (("power_instant_w", "instant"), ("power_w", "1 s average")):
        m = d[col].notna().to_numpy()
        if m.any():
            power.append((label, t_all[m], d[col].to_numpy(float)[m]))
    if not power and d["energy_j"].notna().sum() > 2:  # a counter alone (RAPL): its derivative
        c = d[d["energy_j"].notna()]
        t, e = c["t_s"].to_numpy(float), c["energy_j"].to_numpy(float)
        ok = np.diff(t) > 0
        power.append(("from counter", t[1:][ok], (np.diff(e) / np.maximum(np.diff(t), 1e-9))[ok]))
    if power:
        out.append(("power", "W", power))
    for col, title, unit, scale in (
        ("util_pct", "utilization", "%", 1.0),
        ("mem_used_bytes", "memory used", "GiB", 2.0**-30),
        ("sm_clock_mhz", "SM clock", "MHz", 1.0),
    ):
        m = d[col].notna().to_numpy()
        if m.any():
            out.append((title, unit, [("", t_all[m], d[col].to_numpy(float)[m] * scale)]))
    return out


def run_bands(record: Any, steps: Any, run_dir: Path) -> list[tuple[float, float, str]]:
    """The run's segments on its clock: warm-up, measured, overhead blocks, isolation replays."""
    ex = record.extra or {}
    bands = []
    if steps is not None and {"segment", "host_t1_s", "host_step_s"} <= set(steps.columns):
        w = steps[steps["segment"] == "warmup"]
        if len(w):
            bands.append(
                (
                    float((w["host_t1_s"] - w["host_step_s"]).min()),
                    float(w["host_t1_s"].max()),
                    "warm-up",
                )
            )
    for key, label in (("measured_segment", "measured"), ("overhead_segment", "overhead")):
        seg = ex.get(key)
        if seg and seg.get("t1_s") is not None:
            bands.append((float(seg["t0_s"]), float(seg["t1_s"]), label))
    iso = read_optional_csv(run_dir / "isolation_windows.csv")
    if iso is not None and {"replay", "t0_s", "t1_s"} <= set(iso.columns):
        bands += [
            (float(r.t0_s), float(r.t1_s), f"isolation: {r.replay}")
            for r in iso.itertuples(index=False)
        ]
    return bands


def timeline_plot(
    samples: pd.DataFrame,
    out_dir: Path,
    name: str,
    title: str,
    *,
    bands: Sequence[tuple[float, float, str]] = (),
    spans: pd.DataFrame | None = None,
    window_s: tuple[float, float] | None = None,
) -> Plot:
    """Power, utilization, memory and SM clock of every device over time.

    Args:
        samples: samples.csv.
        bands: (t0_s, t1_s, label) segments shaded across the panels (warm-up, measured, ...).
        spans: spans.csv; when given, top-level phases are shaded and a lane per phase drawn.
        window_s: show only this time range (the zoomed view of a few steps).
    """
    if samples is None or not len(samples):
        return Plot(name, title, reason="samples.csv holds no sensor readings")
    s = samples
    if window_s is not None:
        s = s[(s["t_s"] >= window_s[0] - 0.2) & (s["t_s"] <= window_s[1] + 0.2)]
    devices = sorted(s["device"].astype(str).unique())
    panels: dict[tuple[str, str], list] = {}
    for dev in devices:
        for ptitle, unit, lines in _signals(s[s["device"] == dev]):
            panels.setdefault((ptitle, unit), []).extend(
                (f"{dev} {lab}".strip() if len(devices) > 1 or lab else dev, t, v)
                for lab, t, v in lines
            )
    if not panels:
        return Plot(name, title, reason="no power, utilization, memory or clock readings")
    lane = spans is not None and len(spans) > 0
    pcol = phase_colors(spans["phase"]) if lane else {}
    n = len(panels) + int(lane)
    ratios = ([0.6] if lane else []) + [1.0] * len(panels)
    fig, axes = new_figure(
        n, 1, 10, 1.5 + 1.7 * n, sharex=True, gridspec_kw={"height_ratios": ratios}
    )
    axes = axes[:, 0]
    if lane:
        _phase_lane(axes[0], spans, pcol)
    for ax, ((ptitle, unit), lines) in zip(axes[int(lane) :], panels.items(), strict=True):
        for label, t, v in lines:
            tt, vv = downsample(t, v)
            ax.plot(tt, vv, lw=0.9, label=label)
        ax.set_ylabel(f"{ptitle} ({unit})")
        if len(lines) > 1:
            ax.legend(fontsize=7, loc="upper right")
        for t0, t1, label in bands:
            ax.axvspan(
                t0,
                t1,
                color=SEGMENT_COLORS.get(label.split(":")[0], "#eeeeee"),
                alpha=0.5,
                lw=0,
                zorder=0,
            )
        if lane:
            top = spans[~spans["phase"].str.contains("/", regex=False)]
            for r in top.itertuples(index=False):
                ax.axvspan(r.t0_s, r.t1_s, color=pcol[r.phase], alpha=0.15, lw=0, zorder=0)
    if bands:
        from matplotlib.patches import Patch

        labels = list(dict.fromkeys(b[2].split(":")[0] for b in bands))
        axes[-1].legend(
            handles=[Patch(color=SEGMENT_COLORS.get(lb, "#eeeeee"), label=lb) for lb in labels],
            fontsize=7,
            loc="lower right",
            title="segment",
            title_fontsize=7,
        )
    if window_s is not None:
        axes[-1].set_xlim(*window_s)
    axes[-1].set_xlabel("time since the run began (s)")
    fig.suptitle(title, fontsize=10)
    caption = (
        "Sensor readings as recorded (samples.csv); "
        + (f"averaged into {MAX_POINTS} time bins where longer. " if window_s is None else "")
        + ("phases shaded from spans.csv." if lane else "")
    )
    return Plot(name, title, save(fig, out_dir, name), caption=caption)


CANONICAL_PHASES = (
    "data",
    "forward",
    "backward",
    "optimizer",
    "ema",
    "idle",
    "untracked",
    "forward/target",
    "forward/context",
    "optimizer+ema",
)
"""The training phases' order for colors: a phase keeps its color in every figure and report,
whichever phases each figure happens to show."""


def phase_colors(phases: Sequence[str]) -> dict[str, Any]:
    """One color per phase name: the canonical phases by their fixed slot, then any others
    (user-named), top-level first, in the slots left."""
    from matplotlib import colormaps

    names = list(dict.fromkeys(phases))
    others = [n for n in names if n not in CANONICAL_PHASES]
    others = [n for n in others if "/" not in n] + [n for n in others if "/" in n]
    tab10, tab20 = colormaps["tab10"], colormaps["tab20"]
    col = {n: tab10(i) for i, n in enumerate(CANONICAL_PHASES)}
    col |= {n: tab20((2 * j + 1) % tab20.N) for j, n in enumerate(others)}  # the light shades
    return {n: col[n] for n in names}


def _phase_lane(ax: Any, spans: pd.DataFrame, col: dict[str, Any]) -> None:
    names = list(dict.fromkeys(spans["phase"]))
    for i, ph in enumerate(names):
        sp = spans[spans["phase"] == ph]
        ax.broken_barh(
            list(zip(sp["t0_s"], sp["t1_s"] - sp["t0_s"], strict=True)),
            (i - 0.4, 0.8),
            color=col[ph],
        )
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_ylabel("phase")


def zoom_steps(spans: pd.DataFrame | None, n_steps: int = ZOOM_STEPS) -> list[Any]:
    """A few steps from the middle of the recorded steps (all of them if the run is short)."""
    if spans is None or not len(spans):
        return []
    steps = sorted(spans["step"].unique())
    mid = len(steps) // 2
    return steps[max(0, mid - n_steps // 2) : max(0, mid - n_steps // 2) + n_steps]


def zoom_window(spans: pd.DataFrame, n_steps: int = ZOOM_STEPS) -> tuple[float, float] | None:
    """The time span of `zoom_steps` (None without spans)."""
    pick = zoom_steps(spans, n_steps)
    if not pick:
        return None
    sel = spans[spans["step"].isin(pick)]
    return float(sel["t0_s"].min()), float(sel["t1_s"].max())


def zoom_title(spans: pd.DataFrame | None, steps: pd.DataFrame | None) -> str:
    """The zoomed timeline's title, claiming only what the run holds: the steps it shows with
    their phases (spans.csv), a few steps (steps.csv alone, no phases), or no steps at all."""
    n = len(zoom_steps(spans))
    if n:
        return f"Telemetry over {n} step{'s' if n != 1 else ''}, phases shaded"
    if steps is not None and len(steps):
        return "Telemetry over a few steps"
    return "Zoomed telemetry"


def phase_energy_plot(phases: pd.DataFrame, out_dir: Path) -> Plot:
    """Energy per step of each phase by method (bars, interval as error bars), and mean power."""
    name, title = "phase_energy", "Energy per phase and step, by method"
    methods = list(dict.fromkeys(phases["method"]))
    names = list(dict.fromkeys(phases["phase"]))
    fig, axes = new_figure(1, 2, 11, 4.0)
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(names))
    col = colors(methods)
    labelled: set[str] = set()  # each method named once, on its first drawn bar
    for k, m in enumerate(methods):
        g = phases[phases["method"] == m].set_index("phase")
        xs = x + (k - (len(methods) - 1) / 2) * width
        for xi, ph in zip(xs, names, strict=True):
            if ph not in g.index:
                continue
            r = g.loc[ph]
            if not r["resolved"] or pd.isna(r["energy_per_step_j"]):
                mark_unavailable(axes[0, 0], xi, "unresolved")
                mark_unavailable(axes[0, 1], xi, "unresolved")
                continue
            e, lo, hi = r["energy_per_step_j"], r["energy_per_step_lo_j"], r["energy_per_step_hi_j"]
            err = None if pd.isna(lo) or pd.isna(hi) else [[max(e - lo, 0)], [max(hi - e, 0)]]
            axes[0, 0].bar(
                xi,
                e,
                width,
                yerr=err,
                capsize=3,
                color=col[m],
                label=None if m in labelled else m,
            )
            labelled.add(m)
            if not pd.isna(r["mean_power_w"]):
                axes[0, 1].bar(xi, r["mean_power_w"], width, color=col[m])
    for ax, ylabel in ((axes[0, 0], "energy per step (J)"), (axes[0, 1], "mean power (W)")):
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
    axes[0, 0].legend(fontsize=8, title="method", title_fontsize=8)
    fig.suptitle(title, fontsize=10)
    return Plot(
        name,
        title,
        save(fig, out_dir, name),
        caption="Error bars: each method's interval (regression: bootstrap; isolation: "
        "counter bounds through the differencing). Unresolved phases are marked, not "
        "drawn as 0.",
    )


def phase_time_plot(stats: pd.DataFrame, out_dir: Path) -> Plot:
    """Exclusive time per step of each phase: the mean, and the 10th–90th percentile range of
    the per-occurrence times as whiskers (times are positive and skewed: an sd bar would not be)."""
    name, title = "phase_time", "Time per phase and step"
    fig, axes = new_figure(1, 1, 8, 0.8 + 0.35 * len(stats))
    ax = axes[0, 0]
    y = np.arange(len(stats))
    col = phase_colors(list(stats["phase"]))
    ax.barh(
        y,
        1e3 * stats["time_per_step_s"],
        xerr=1e3
        * np.vstack(
            [
                (stats["time_per_step_s"] - stats["time_p10_s"]).clip(lower=0).fillna(0),
                (stats["time_p90_s"] - stats["time_per_step_s"]).clip(lower=0).fillna(0),
            ]
        ),
        color=[col[p] for p in stats["phase"]],
        capsize=3,
    )
    ax.set_yticks(y, stats["phase"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time per step (ms), exclusive of sub-phases")
    fig.suptitle(title, fontsize=10)
    return Plot(
        name,
        title,
        save(fig, out_dir, name),
        caption="From spans.csv; whiskers: 10th–90th percentile over phase occurrences.",
    )


def step_time_plot(steps: pd.DataFrame, out_dir: Path) -> Plot:
    """Host time of every step, coloured by segment (warm-up, measured, overhead)."""
    name, title = "step_times", "Step times (host)"
    fig, axes = new_figure(1, 1, 9, 3.2)
    ax = axes[0, 0]
    seg_col = {"warmup": "#888888", "measured": "#2a7d2a", "overhead": "#c07a10"}
    for seg, g in steps.groupby("segment", sort=False):
        ax.plot(g["step"], 1e3 * g["host_step_s"], ".", ms=3, color=seg_col.get(seg), label=seg)
    ax.set_yscale("log")
    ax.set_xlabel("step (all segments, in order)")
    ax.set_ylabel("host time per step (ms)")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return Plot(
        name,
        title,
        save(fig, out_dir, name),
        caption="From steps.csv. Warm-up steps are synchronized; measured steps are not "
        "(their host time is when the host was free to go on, the segment's throughput "
        "is timed between two synchronizations).",
    )
