"""Does the energy the counter books trail the work? Its response, measured, and what it changes.

`probe RUN_DIR`: on a load with sharp recorded edges (kernel_probe.py: matmul bursts and idle
gaps), the counter's rows alone (the energy between two of its refreshes, each placed where
the counter's reads put its refresh grid, nothing refined) are fitted as the power of the busy
and idle phases seen through a response to a unit of energy drawn at t: a share 1 − f booked
at t + lag, the rest trailing as an exponential of time constant τ
(`jouleprof.attribution.kernels.counter_delays`, as `RegressionConfig.counter_tail_s`,
`counter_tail_fraction`, `counter_lag_s` take it). The scan over (τ, f, lag) gives each
model's residual; a moving-block bootstrap of the rows, refitting the whole scan on every
resample, gives the spread of the best (τ, f, lag) and of the response's mean delay. A
shape-free response (a non-negative weight per bin of delay) shows where the delayed energy
sits without assuming the exponential.

`runs RUN_DIR ... --tail-ms T --fraction F --lag-ms L`: each training run (attr_vith_b8)
attributed by regression with and without that kernel, plain and stall models (and a control:
no kernel, the counter's grid held as the kernel holds it), compared per phase with isolation
(`attribution_compare.compare`), written to RUN/counter_tail.json.

    PYTHONPATH=src python3 benchmarks/counter_tail.py probe RUN_DIR [--json OUT.json]
    PYTHONPATH=src python3 benchmarks/counter_tail.py runs RUN_DIR... --tail-ms 12
        --fraction 0.4 --lag-ms 0.5 [--json-name counter_tail.json]
    PYTHONPATH=src python3 benchmarks/counter_tail.py table RUN_DIR/counter_tail.json...

Reads the run directories; `runs` writes RUN/counter_tail.json (its phase files go to a
scratch folder), `table` prints its results as a markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from jouleprof.attribution.common import EXCLUDED, build_timeline
from jouleprof.attribution.grid import device_grids
from jouleprof.attribution.kernels import counter_delays
from jouleprof.attribution.placement import delayed_fractions
from jouleprof.attribution.rows import COUNTER, sensor_rows
from jouleprof.sensors.refresh import (
    _inconsistency,  # the gap-contradiction count the grid fit uses
)

REACH_S = 0.25
"""Rows whose interval less this much touches excluded time are left out (every kernel of
the scan sees the same rows)."""
TAILS_MS = (0, 2, 4, 6, 8, 10, 12, 15, 20, 25, 30, 40)
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LAGS_MS = tuple(np.round(np.arange(-10.0, 8.01, 0.5), 2))


def probe_rows(run: Path, device: str = "gpu0"):
    """The timeline, the counter's rows (on the grid its reads give, nothing refined) and the
    counter grid of a probe run."""
    samples = pd.read_csv(run / "samples.csv")
    spans = pd.read_csv(run / "spans.csv")
    dev = samples[samples["device"].astype(str) == device]
    t = dev["t_s"].to_numpy(float)
    tl = build_timeline(spans, float(t.min()), float(t.max()), 0)
    grids, _ = device_grids(samples, dev, True, False)
    if "counter" not in grids:
        raise SystemExit(f"{run}: the counter's refreshes cannot be placed")
    jc = grids["counter"]
    rows = sensor_rows(dev, {COUNTER: jc.grid}, counter_weight=1.0, instant=None)
    frac = tl.overlap_s(rows.t0_s - REACH_S, rows.t1_s + 0.01)
    excl = [tl.names.index(nm) for nm in EXCLUDED]
    keep = (
        (frac[:, excl].max(axis=1) <= 1e-9)
        & (rows.t0_s - REACH_S >= tl.edges_s[0])
        & (rows.t1_s + 0.01 <= tl.edges_s[-1])
    )
    return tl, rows.select(keep), jc


def grid_window_ms(samples: pd.DataFrame, device: str, period_s: float, step_ms: float = 0.05):
    """The offsets (ms, modulo the period) of a refresh grid of `period_s` that no read of the
    counter contradicts: every pair of reads whose value changed holds a refresh, every pair
    that did not holds none (the fewest contradictions where none is free of them). Where the
    reads alone place the grid, independent of the power data; (lo, hi, contradictions)."""
    e = samples[samples["device"].astype(str) == device].dropna(subset=["energy_j"])
    t, v = e["t_s"].to_numpy(float), e["energy_j"].to_numpy(float)
    changed = np.diff(v) > 0
    offs = np.arange(0.0, period_s, step_ms / 1e3)
    bad = _inconsistency(t[:-1], t[1:], changed, period_s, offs)
    ok = offs[bad == bad.min()]
    # The window may wrap around the period: report it around its middle.
    if len(ok) > 1 and ok[-1] - ok[0] > period_s / 2:
        ok = np.where(ok < period_s / 2, ok + period_s, ok)
    return float(1e3 * ok.min()), float(1e3 * ok.max()), int(bad.min())


def scan(tl, rows, jitter_s: float, tails_ms=TAILS_MS, fractions=FRACTIONS, lags_ms=LAGS_MS):
    """Every kernel of the scan: its (τ ms, f, lag ms) and design matrix (rows × fitted labels)."""
    cols = [j for j, nm in enumerate(tl.names) if nm not in EXCLUDED]
    kernels, designs = [], []
    for tau in tails_ms:
        for f in fractions if tau > 0 else (0.0,):
            for lag in lags_ms:
                d = counter_delays(tau / 1e3, f, lag / 1e3)
                x = delayed_fractions(tl, rows.t0_s, rows.t1_s, d, jitter_s)[:, cols]
                kernels.append((float(tau), float(f), float(lag)))
                designs.append(x)
    return kernels, np.stack(designs), [tl.names[j] for j in cols]


def _rss(gram, xy, yy):
    """Residual sum of squares of least squares per kernel, from its Gram sums (..., p, p)."""
    p = np.linalg.solve(gram + 1e-9 * np.eye(gram.shape[-1]), xy[..., None])[..., 0]
    return yy - np.einsum("...i,...i", p, xy), p


def fit_scan(
    kernels, designs, y, w, n_boot: int = 500, block_s: float = 1.5, seed: int = 0, mid_s=None
):
    """The residual of each kernel, the best, and the bootstrap of the best.

    Least squares (the phase powers come out positive here; a probe has two, busy and idle),
    rows weighed by `w`. The bootstrap resamples blocks of consecutive rows (~`block_s`
    seconds: neighbouring rows share a refresh edge) and picks the best kernel again."""
    xw = designs * w[None, :, None]
    yw = y * w
    n = len(y)
    g = np.einsum("kni,knj->knij", xw, xw)
    gc = np.concatenate([np.zeros((len(kernels), 1) + g.shape[2:]), np.cumsum(g, axis=1)], 1)
    xyc = np.concatenate(
        [np.zeros((len(kernels), 1, xw.shape[2])), np.cumsum(xw * yw[None, :, None], 1)], 1
    )
    yyc = np.concatenate([[0.0], np.cumsum(yw**2)])
    rss, power = _rss(gc[:, -1], xyc[:, -1], yyc[-1])
    res_w = np.sqrt(np.maximum(rss, 0) / n)
    span = float(mid_s[-1] - mid_s[0]) if mid_s is not None else float(n)
    block = int(np.clip(round(block_s * n / span), 1, max(n // 10, 1)))
    n_blocks = int(np.ceil(n / block))
    rng = np.random.default_rng(seed)
    picks = []
    for _ in range(n_boot):
        s = rng.integers(0, n - block + 1, size=n_blocks)
        gram = (gc[:, s + block] - gc[:, s]).sum(1)
        xy = (xyc[:, s + block] - xyc[:, s]).sum(1)
        yy = float((yyc[s + block] - yyc[s]).sum())
        r, _ = _rss(gram, xy, yy)
        picks.append(int(np.argmin(r)))
    return res_w, power, np.array(picks), block


def mean_delay_ms(k) -> float:
    """The response's mean delay (ms): lag + f × τ."""
    tau, f, lag = k
    return lag + f * tau


def late_share(k, after_ms: float) -> float:
    """Share of a unit of energy the response books more than `after_ms` after it is drawn."""
    tau, f, lag = k
    prompt = (1 - f) if lag > after_ms else 0.0
    if tau == 0 or f == 0:
        return 1.0 if lag > after_ms else 0.0
    return prompt + f * float(np.exp(-max(after_ms - lag, 0.0) / tau))


def shape_free(
    tl,
    rows,
    jitter_s: float,
    phase: str,
    w,
    bin_ms: float = 4.0,
    lo_ms: float = -8.0,
    hi_ms: float = 64.0,
) -> dict:
    """The counter's response to `phase` without a shape: a baseline plus a non-negative weight
    per bin of delay (each bin's share of the phase's time, delayed by it)."""
    j = tl.names.index(phase)
    starts = np.arange(lo_ms, hi_ms - bin_ms / 2, bin_ms) / 1e3
    dt = rows.t1_s - rows.t0_s
    cols = []
    sub = np.linspace(0.0, bin_ms / 1e3, 9)[:-1] + bin_ms / 1e3 / 16
    for s in starts:
        acc = np.zeros(len(rows))
        for z in sub:
            acc += tl.overlap_s(rows.t0_s - s - z, rows.t1_s - s - z, jitter_s)[:, j]
        cols.append(acc / len(sub) / dt)
    x = np.column_stack([*cols, np.ones(len(rows))])
    y = rows.power_w
    lower = np.r_[np.zeros(len(starts)), -np.inf]
    fit = lsq_linear(x * w[:, None], y * w, bounds=(lower, np.inf))
    h, base = fit.x[:-1], float(fit.x[-1])
    total = float(h.sum())
    mids = 1e3 * starts + bin_ms / 2
    return {
        "phase": phase,
        "bin_ms": bin_ms,
        "baseline_w": base,
        "step_w": total,
        "residual_w": float(np.sqrt(np.mean(((y - x @ fit.x) * w) ** 2))),
        "centroid_ms": float(h @ mids / total) if total > 0 else None,
        "share_after_6ms": float(h[starts >= 0.006 - 1e-9].sum() / total) if total else None,
        "bins": [
            {"from_ms": float(1e3 * s), "to_ms": float(1e3 * s + bin_ms), "weight_w": float(v)}
            for s, v in zip(starts, h, strict=True)
        ],
    }


def probe(
    run: Path,
    device: str = "gpu0",
    n_boot: int = 500,
    seed: int = 0,
    tails_ms=TAILS_MS,
    fractions=FRACTIONS,
    lags_ms=LAGS_MS,
) -> dict:
    """The counter's response on a probe run (module docstring), over the scan's grid."""
    tl, rows, jc = probe_rows(run, device)
    kernels, designs, names = scan(tl, rows, jc.jitter_s, tails_ms, fractions, lags_ms)
    y, w = rows.power_w, rows.weight
    res_w, power, picks, block = fit_scan(
        kernels, designs, y, w, n_boot, seed=seed, mid_s=rows.mid_s
    )
    best = int(np.argmin(res_w))
    none = kernels.index((0.0, 0.0, 0.0))
    lag_only = [i for i, k in enumerate(kernels) if k[0] == 0]
    best_lag = min(lag_only, key=lambda i: res_w[i])

    def entry(i: int) -> dict:
        k = kernels[i]
        return {
            "tail_ms": k[0],
            "fraction": k[1],
            "lag_ms": k[2],
            "mean_delay_ms": mean_delay_ms(k),
            "late_share_6ms": late_share(k, 6.0),
            "residual_w": float(res_w[i]),
            "power_w": dict(zip(names, map(float, power[i]), strict=True)),
        }

    boot = [kernels[i] for i in picks]

    def q(vals) -> dict:
        lo, med, hi = np.quantile(vals, [0.025, 0.5, 0.975])
        return {"median": float(med), "lo95": float(lo), "hi95": float(hi)}

    busy = "busy" if "busy" in names else [nm for nm in names if nm != "idle"][0]
    lo, hi, bad = grid_window_ms(pd.read_csv(run / "samples.csv"), device, jc.grid.period_s)
    out = {
        "run": str(run),
        "device": device,
        "n_rows": len(rows),
        "counter_grid": jc.to_json(),
        "counter_grid_offset_ms": 1e3 * (jc.grid.offset_s % jc.grid.period_s),
        "counter_grid_window_ms": {"lo": lo, "hi": hi, "contradicting_reads": bad},
        "none": entry(none),
        "best_lag_only": entry(best_lag),
        "best": entry(best),
        "bootstrap": {
            "n_boot": n_boot,
            "block_rows": block,
            "best_is_no_kernel": float(np.mean(picks == none)),
            "best_is_lag_only": float(np.mean([k[0] == 0 for k in boot])),
            "tail_ms": q([k[0] for k in boot]),
            "fraction": q([k[1] for k in boot]),
            "lag_ms": q([k[2] for k in boot]),
            "mean_delay_ms": q([mean_delay_ms(k) for k in boot]),
            "late_share_6ms": q([late_share(k, 6.0) for k in boot]),
        },
        "profile_tail": [
            entry(min((i for i, k in enumerate(kernels) if k[0] == tau), key=lambda i: res_w[i]))
            for tau in tails_ms
        ],
        "shape_free": shape_free(tl, rows, jc.jitter_s, busy, w),
    }
    return out


def _print_probe(p: dict) -> None:
    def line(e: dict) -> str:
        return (
            f"tail {e['tail_ms']:g} ms, fraction {e['fraction']:g}, lag {e['lag_ms']:+g} ms "
            f"(mean delay {e['mean_delay_ms']:.1f} ms, {100 * e['late_share_6ms']:.0f} % booked "
            f"> 6 ms late): residual {e['residual_w']:.2f} W; "
            + ", ".join(f"{k} {v:.0f} W" for k, v in e["power_w"].items())
        )

    g = p["counter_grid_window_ms"]
    print(
        f"{p['run']}: {p['n_rows']} counter rows; its grid at {p['counter_grid_offset_ms']:.2f} "
        f"ms, the reads allow {g['lo']:.2f}-{g['hi']:.2f} ms ({g['contradicting_reads']} reads "
        "against)"
    )
    print("  no kernel:   " + line(p["none"]))
    print("  lag only:    " + line(p["best_lag_only"]))
    print("  best:        " + line(p["best"]))
    b = p["bootstrap"]
    print(
        f"  bootstrap ({b['n_boot']} resamples of {b['block_rows']}-row blocks): no kernel "
        f"best in {100 * b['best_is_no_kernel']:.0f} %, a lag alone in "
        f"{100 * b['best_is_lag_only']:.0f} %"
    )
    for k in ("tail_ms", "fraction", "lag_ms", "mean_delay_ms", "late_share_6ms"):
        v = b[k]
        print(f"    {k:15s} median {v['median']:6.2f}  95 % [{v['lo95']:.2f}, {v['hi95']:.2f}]")
    print("  profile over the tail (best fraction and lag at each τ):")
    for e in p["profile_tail"]:
        print(
            f"    τ {e['tail_ms']:4g} ms: f {e['fraction']:.1f}, lag {e['lag_ms']:+4.1f} ms, "
            f"residual {e['residual_w']:.2f} W"
        )
    s = p["shape_free"]
    print(
        f"  shape-free ({s['bin_ms']:g} ms bins): residual {s['residual_w']:.2f} W, baseline "
        f"{s['baseline_w']:.0f} W + {s['step_w']:.0f} W, centroid {s['centroid_ms']:.1f} ms, "
        f"{100 * s['share_after_6ms']:.0f} % of the weight > 6 ms late"
    )
    print(
        "    "
        + ", ".join(
            f"{b['from_ms']:+.0f}..{b['to_ms']:+.0f}: {b['weight_w']:.0f}"
            for b in s["bins"]
            if b["weight_w"] > 0.5
        )
    )


MODELS = (
    ("plain", {"stall_model": False}, False),
    ("stall", {"stall_model": True}, False),
    ("plain_held", {"stall_model": False}, "held"),
    ("stall_held", {"stall_model": True}, "held"),
    ("plain_kernel", {"stall_model": False}, True),
    ("stall_kernel", {"stall_model": True}, True),
    ("counter_only", {"stall_model": False, "use_instant": False}, False),
    ("counter_only_kernel", {"stall_model": False, "use_instant": False}, True),
)
"""(name, settings, kernel): each run is fitted without the kernel (the regression as it
stands), with the counter's grid held as the kernel holds it but no kernel (a control: what
holding the grid alone changes), and with the kernel; each with the plain and the stall
model; and from the counter's rows alone (no instant field), plain, without and with it."""
TOP = ("forward", "backward", "optimizer", "ema", "optimizer+ema")
_UNRESOLVED = re.compile(
    r"interval \[([-\d.e+]+), ([-\d.e+]+)\] J (?:over the run )?is wider than "
    r"the estimate ([-\d.e+]+) J"
)


def _kernel_opts(tail_ms: float, fraction: float, lag_ms: float) -> dict:
    return {
        "counter_tail_s": tail_ms / 1e3,
        "counter_tail_fraction": fraction,
        "counter_lag_s": lag_ms / 1e3,
    }


def evaluate(run: Path, kernel: dict, work: Path) -> dict:
    """Each model of MODELS on `run`, compared per phase with isolation (and with the step
    less the other phases, for a replay that is not faithful). `work`: a scratch folder where
    the run's files are linked and the phase files written."""
    import attribution_compare as ac

    from jouleprof.attribution import attribute
    from jouleprof.attribution.regression import COUNTER_KERNEL_SHIFT_SD_S
    from jouleprof.store.rundir import RunDir

    rd = work / run.name
    rd.mkdir(parents=True, exist_ok=True)
    for f in run.iterdir():
        if f.is_file() and not f.name.startswith("phases_regression"):
            link = rd / f.name
            if not link.exists():
                link.symlink_to(f.resolve())
    out: dict = {"run": str(run), "kernel": kernel, "models": {}}
    samples = pd.read_csv(run / "samples.csv")
    dev = samples[samples["device"].astype(str) == "gpu0"]
    jc = device_grids(samples, dev, True, False)[0]["counter"]
    lo, hi, bad = grid_window_ms(samples, "gpu0", jc.grid.period_s)
    out["counter_grid"] = {
        "offset_ms": 1e3 * (jc.grid.offset_s % jc.grid.period_s),
        "offset_se_ms": 1e3 * jc.offset_se_s,
        "jitter_ms": 1e3 * jc.jitter_s,
        "reads_allow_ms": [lo, hi],
        "contradicting_reads": bad,
    }
    for name, settings, with_kernel in MODELS:
        opts = dict(settings)
        if with_kernel is True:
            opts.update(kernel)
        elif with_kernel == "held":
            opts["counter_shift_sd_s"] = COUNTER_KERNEL_SHIFT_SD_S
        res = attribute(rd, "regression", warmup_steps=0, **opts)
        dev = res.devices[0]
        file = f"phases_regression_ct_{name}.csv"
        RunDir(rd).write_phases(res.to_frame(), name=file)
        cmp = ac.compare(rd, file)
        table = ac.per_step(rd, "regression", file)
        dg = dev.diagnostics
        model = {
            "settings": opts,
            "residual_rms_w": dg["residual_rms_w"],
            "residual_by_signal_w": {k: v["residual_rms_w"] for k, v in dg["rows"].items()},
            "counter_shift_ms": 1e3 * dg["placement"]["counter_shift_s"]["value"],
            "counter_shift_sd_ms": 1e3 * dg["placement"]["counter_shift_s"]["sd"],
            "phases": {},
        }
        unresolved = {}
        for ph in dev.phases:
            m = _UNRESOLVED.search(ph.note or "")
            if m and not ph.resolved:
                n = max(ph.n_steps, 1)
                unresolved[ph.phase] = [float(m.group(i)) / n for i in (3, 1, 2)]
        # A top-level phase whose children are not all resolved is summed from a part of it
        # (attribution_compare sums what is there): say so instead of comparing it.
        time_of: dict[str, float] = {}
        lost: dict[str, float] = {}
        for ph in dev.phases:
            top = ph.phase.split("/")[0]
            time_of[top] = time_of.get(top, 0.0) + ph.time_s
            if not ph.resolved:
                lost[top] = lost.get(top, 0.0) + ph.time_s
        for phase in TOP:
            row = dict(cmp["phases"].get(phase, {}))
            part = lost.get(phase, 0.0) / time_of[phase] if time_of.get(phase) else 0.0
            if "/" not in phase and 0.01 < part < 1.0 and "regression_j" in row:
                for k in (
                    "regression_j",
                    "regression_vs_isolation_pct",
                    "regression_vs_difference_pct",
                ):
                    row.pop(k, None)
                row["incomplete_unresolved_time_share"] = part
            keys = (
                "isolation_j",
                "share_pct",
                "regression_j",
                "regression_vs_isolation_pct",
                "difference_j",
                "regression_vs_difference_pct",
                "replay_faithful",
                "incomplete_unresolved_time_share",
            )
            entry = {k: row[k] for k in keys if row.get(k) is not None}
            if phase != "backward":  # step − others is the backward's second reference only
                entry.pop("difference_j", None)
                entry.pop("regression_vs_difference_pct", None)
            if table is not None and phase in table.index and entry.get("regression_j"):
                entry["lo_j"] = float(table.loc[phase, "lo_per_step_j"])
                entry["hi_j"] = float(table.loc[phase, "hi_per_step_j"])
            elif phase in unresolved:
                e, lo, hi = unresolved[phase]
                entry["unresolved_estimate_j"] = [e, lo, hi]
                if row.get("isolation_j"):
                    entry["unresolved_vs_isolation_pct"] = 100 * (e / row["isolation_j"] - 1)
            if phase == "optimizer+ema" and "isolation_j" not in entry:
                iso = [cmp["phases"].get(p, {}).get("isolation_j") for p in ("optimizer", "ema")]
                if all(iso):
                    entry["isolation_j"] = float(sum(iso))
            model["phases"][phase] = entry
        out["models"][name] = model
        print(f"{run.name} {name}: {_line(model)}", flush=True)
    return out


def _line(model: dict) -> str:
    parts = [
        f"residual {model['residual_rms_w']:.1f} W (counter "
        f"{model['residual_by_signal_w'].get('counter', float('nan')):.1f} W), shift "
        f"{model['counter_shift_ms']:+.2f} ms"
    ]
    for phase, e in model["phases"].items():
        if "regression_j" in e:
            d = f"{e['regression_vs_isolation_pct']:+.1f} %"
            if "regression_vs_difference_pct" in e:
                d += f" / {e['regression_vs_difference_pct']:+.1f} %"
            parts.append(f"{phase} {e['regression_j']:.2f} J ({d})")
        elif "unresolved_estimate_j" in e:
            parts.append(f"{phase} unresolved ({e['unresolved_estimate_j'][0]:.2f} J)")
        elif "incomplete_unresolved_time_share" in e:
            parts.append(f"{phase} incomplete")
    return "; ".join(parts)


def _cell(e: dict, phase: str) -> str:
    """One model's figure for one phase: J per step and its difference from isolation (for
    the backward also from the step less the other phases); "u" marks an unresolved phase's
    estimate, "—" nothing to show."""
    if "regression_j" in e:
        v, d = e["regression_j"], f"{e['regression_vs_isolation_pct']:+.1f}"
        if "regression_vs_difference_pct" in e:
            d += f"; {e['regression_vs_difference_pct']:+.1f}"
        return f"{v:.2f} ({d})"
    if "unresolved_estimate_j" in e:
        v = e["unresolved_estimate_j"][0]
        iso = e.get("isolation_j")
        return f"u {v:.2f}" + (f" ({100 * (v / iso - 1):+.0f})" if iso else "")
    if "incomplete_unresolved_time_share" in e:
        return "part unresolved"
    return "—"


def table(files: list[Path]) -> str:
    """A markdown table of `runs` results (RUN/counter_tail*.json): per run and phase, the
    isolation reference and each model's energy per step with its difference in percent."""
    cols = ("plain", "plain_kernel", "stall", "stall_kernel", "counter_only", "counter_only_kernel")
    lines = [
        "| run | phase | isolation (step − others) | " + " | ".join(cols) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in cols) + " |",
    ]
    for f in files:
        r = json.loads(f.read_text())
        name = Path(r["run"]).name
        m = r["models"]
        for phase in TOP:
            ref = m["plain"]["phases"].get(phase, {})
            iso = ref.get("isolation_j")
            iso_s = "—" if iso is None else f"{iso:.2f}"
            if "difference_j" in ref:
                iso_s += f" ({ref['difference_j']:.2f})"
            cells = [_cell(m[c]["phases"].get(phase, {}), phase) for c in cols]
            lines.append(f"| {name} | {phase} | {iso_s} | " + " | ".join(cells) + " |")
        res = [f"{m[c]['residual_by_signal_w'].get('counter', float('nan')):.1f}" for c in cols]
        lines.append(f"| {name} | counter rows' residual (W) | | " + " | ".join(res) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("probe")
    pp.add_argument("run", type=Path)
    pp.add_argument("--device", default="gpu0")
    pp.add_argument("--n-boot", type=int, default=500)
    pp.add_argument("--json", type=Path)
    pr = sub.add_parser("runs")
    pr.add_argument("runs", type=Path, nargs="+")
    pr.add_argument("--tail-ms", type=float, required=True)
    pr.add_argument("--fraction", type=float, required=True)
    pr.add_argument("--lag-ms", type=float, required=True)
    pr.add_argument("--json-name", default="counter_tail.json")
    pt = sub.add_parser("table")
    pt.add_argument("files", type=Path, nargs="+")
    a = ap.parse_args()
    if a.cmd == "table":
        print(table(a.files))
    if a.cmd == "runs":
        import tempfile

        kernel = _kernel_opts(a.tail_ms, a.fraction, a.lag_ms)
        with tempfile.TemporaryDirectory() as tmp:
            for run in a.runs:
                r = evaluate(run, kernel, Path(tmp))
                r["command"] = " ".join(["counter_tail.py", *sys.argv[1:]])
                (run / a.json_name).write_text(json.dumps(r, indent=1))
    if a.cmd == "probe":
        p = probe(a.run, a.device, a.n_boot)
        p["command"] = " ".join(["counter_tail.py", *sys.argv[1:]])
        _print_probe(p)
        if a.json:
            a.json.write_text(json.dumps(p, indent=1))


if __name__ == "__main__":
    main()
