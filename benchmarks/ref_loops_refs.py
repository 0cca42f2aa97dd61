"""Reference phase energies of benchmarks/ref_loops.py's windows, two independent ways.

From a loop's ref/ run directory (samples.csv, power_buffer.csv, ref_windows.csv), pure
functions of recorded data:

- alone:  phase X replayed back to back: E(window) / calls, per call;
- added:  the step with each X run k+1 times against the plain step:
          (E_added / cycles − E_plain / cycles) / (k · occurrences of X per cycle);
          the plain cycle's energy is the mean of the plain windows before and after, and half
          their difference (the device's drift over the references) widens the bound;
- removed (a third way, where the loop can run its step without X): the plain step against
          the step without X, (E_plain / cycles − E_removed / cycles) / occurrences: X at the
          step's pace, with what X does to its neighbours (a copy after a GEMM draws more than
          a copy after a copy), which neither of the other two prices. A group "a+b" left out
          at once (`removed_groups`: (J, lo, hi, ms) per cycle) prices the pair's joint row
          with what the two share counted once; the members' own counts it once each.

Both include the board's idle power over the phase's time, as an attributed phase energy does.
They agree where a phase costs the same alone as in its step. They can differ where the power
controller throttles a phase run back to back (an H200 draws above its limit for tens of ms,
then slows the clocks): `near_limit` flags a phase whose alone window read power at or above
`near_limit_frac` of the limit on the fastest sensor recorded (the power buffer, else the
instant field), and such a phase's reference is the added one (priced where it runs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

EDGE_S = 0.15
"""Counter refreshes this close to a window's edge are not used (its power ramps there)."""
AGREE_PCT = 5.0
"""The two references agree when they differ by at most this (percent of their mean)."""
NEAR_LIMIT_FRAC = 0.95


@dataclass(frozen=True)
class PhaseReference:
    """One phase's reference energy per occurrence (J), both ways, and which is used."""

    phase: str
    alone_j: float | None
    alone_lo_j: float | None
    alone_hi_j: float | None
    alone_ms: float | None
    added_j: float | None
    added_lo_j: float | None
    added_hi_j: float | None
    k: int
    occ: int
    diff_pct: float | None
    agree: bool | None
    max_read_w: float | None
    near_limit: bool
    ref_j: float | None
    ref_lo_j: float | None
    ref_hi_j: float | None
    ref_source: str
    note: str = ""
    added_ms: float | None = None
    """The added copies' time each: (the added cycle's time − the plain one's) / (k · occ)."""
    added_ms_hw: float | None = None
    """Half the plain windows' spread of time per cycle, / (k · occ): added_ms's uncertainty."""
    removed_j: float | None = None
    """The third way, where the loop can run without the phase: the plain cycle's energy less
    the cycle's without it, per occurrence (None where not measured)."""
    removed_lo_j: float | None = None
    removed_hi_j: float | None = None
    removed_ms: float | None = None
    """The plain cycle's time less the cycle's without the phase, per occurrence."""

    def row(self) -> dict:
        return asdict(self)


def _device(samples) -> str:
    devs = sorted(samples["device"].astype(str).unique())
    gpus = [d for d in devs if d.startswith("gpu")]
    if gpus:
        return gpus[0]
    if "sim0" in devs:
        return "sim0"
    raise ValueError(f"no GPU or simulated device in samples.csv (devices: {devs})")


def steady_energy(samples, buffer, device: str, t0: float, t1: float, n: int, grids):
    """(energy, lo, hi) J of a window of `n` like calls over [t0, t1], from its steady part.

    A window's edges are a step of power (idle to busy): interpolating the counter across
    them is off by up to a refresh's worth of that step (3 % of a 2.5 s GEMM window on the
    simulated GPU). So the mean power comes from the counter between the first and last
    refresh instants at least `EDGE_S` inside the window, where the calls run steadily, and
    the energy is that power over the window's duration. Its bound: the grid's placement
    (3 σ of its jitter at each end) and the partial calls the two ends cut (each at most a
    call's time × half the range of power read in the window).
    """
    from jouleprof.sensors.refresh import counter_points

    g = grids.get("energy_j")
    d = samples[samples["device"] == device]
    if g is None or "energy_j" not in d or d["energy_j"].notna().sum() < 3:
        return window_energy(samples, device, t0, t1, grids)
    tau, c = counter_points(d["t_s"].to_numpy(float), d["energy_j"].to_numpy(float), g)
    sel = np.flatnonzero((tau >= t0 + EDGE_S) & (tau <= t1 - EDGE_S))
    if len(sel) < 3:
        return window_energy(samples, device, t0, t1, grids)
    a, b = sel[0], sel[-1]
    span_s = float(tau[b] - tau[a])
    p_w = float(c[b] - c[a]) / span_s
    dur = t1 - t0
    hi_w, lo_w = _read_range_w(samples, buffer, device, t0 + EDGE_S, t1 - EDGE_S, p_w)
    slack = 3 * g.jitter_s if np.isfinite(g.jitter_s) else 0.0
    err_j = (dur / n) * (hi_w - lo_w) / 2 + 2 * slack * hi_w
    e = p_w * dur
    return e, e - err_j * dur / span_s, e + err_j * dur / span_s


def _read_range_w(samples, buffer, device, t0, t1, default_w) -> tuple[float, float]:
    """The highest and lowest power read inside [t0, t1] (buffer, else instant)."""
    if buffer is not None and len(buffer):
        b = buffer[(buffer["device"].astype(str) == device) & buffer["t_s"].between(t0, t1)]
        if len(b):
            return float(b["power_w"].max()), float(b["power_w"].min())
    d = samples[(samples["device"] == device) & samples["t_s"].between(t0, t1)]
    if "power_instant_w" in d and d["power_instant_w"].notna().any():
        return float(d["power_instant_w"].max()), float(d["power_instant_w"].min())
    return default_w, default_w


def window_energy(samples, device: str, t0: float, t1: float, grids) -> tuple[float, float, float]:
    """(energy, lo, hi) J of [t0, t1] from the best signal (the counter where read)."""
    from jouleprof.timeline.summary import best_energy
    from jouleprof.timeline.windows import window_energies

    best = best_energy(window_energies(samples, device, t0, t1, grids=grids))
    if best is None or best.energy_j is None:
        raise ValueError(f"no energy for the window [{t0:.3f}, {t1:.3f}] s")
    e = float(best.energy_j)
    lo = e if best.lo_j is None else min(float(best.lo_j), e)
    hi = e if best.hi_j is None else max(float(best.hi_j), e)
    return e, lo, hi


def _max_read_w(samples, buffer, device: str, t0: float, t1: float) -> float | None:
    """The highest power the fastest recorded sensor read inside [t0, t1]."""
    if buffer is not None and len(buffer):
        b = buffer[(buffer["device"].astype(str) == device) & buffer["t_s"].between(t0, t1)]
        if len(b):
            return float(b["power_w"].max())
    d = samples[(samples["device"] == device) & samples["t_s"].between(t0, t1)]
    for col in ("power_instant_w", "power_w"):
        if col in d and d[col].notna().any():
            return float(d[col].max())
    return None


def references(ref_dir: Path, power_limit_w: float | None) -> dict:
    """Every phase's `PhaseReference`, the idle power and the plain cycle's energy."""
    from jouleprof.store.rundir import RunDir
    from jouleprof.timeline.windows import signal_grids

    rd = RunDir(ref_dir)
    samples = rd.read_samples()
    dev = _device(samples)
    samples = samples[samples["device"].astype(str) == dev].reset_index(drop=True)
    bpath = Path(ref_dir) / "power_buffer.csv"
    buffer = pd.read_csv(bpath) if bpath.is_file() and bpath.stat().st_size else None
    wins = pd.read_csv(Path(ref_dir) / "ref_windows.csv")
    spans = rd.read_spans() if (Path(ref_dir) / "spans.csv").is_file() else None
    grids = signal_grids(samples, dev)
    e = [
        steady_energy(samples, buffer, dev, r.t0_s, r.t1_s, max(int(r.n), 1), grids)
        for r in wins.itertuples()
    ]
    wins["e_j"], wins["lo_j"], wins["hi_j"] = zip(*e, strict=True)
    idle = wins[wins["kind"] == "idle"]
    idle_w = float(idle["e_j"].sum() / (idle["t1_s"] - idle["t0_s"]).sum()) if len(idle) else None
    plain = wins[wins["kind"] == "plain"]
    per = plain["e_j"] / plain["n"]
    plain_j = float(per.mean())
    drift_j = float(per.max() - per.min()) / 2 if len(per) > 1 else 0.0
    plain_hw_j = drift_j + _plain_halfwidth(plain)  # the plain cycle's bound: drift, counter
    plain_each_ms = 1e3 * (plain["t1_s"] - plain["t0_s"]) / plain["n"]
    plain_ms = float(plain_each_ms.mean())
    plain_ms_hw = float(plain_each_ms.max() - plain_each_ms.min()) / 2
    out: dict[str, PhaseReference] = {}
    for phase in dict.fromkeys(wins.loc[wins["kind"] == "alone", "phase"]):
        a = wins[(wins["kind"] == "alone") & (wins["phase"] == phase)].iloc[0]
        b = wins[(wins["kind"] == "added") & (wins["phase"] == phase)]
        alone_j, alo, ahi = a.e_j / a.n, a.lo_j / a.n, a.hi_j / a.n
        # The calls' own scatter: a window of n calls prices their mean time, which differs
        # from the measured steps' mean by its standard error (2 σ added to the bound).
        se = _time_se_rel(spans, phase, float(a.t0_s), float(a.t1_s))
        alo = alone_j - float(np.hypot(alone_j - alo, 2 * se * alone_j))
        ahi = alone_j + float(np.hypot(ahi - alone_j, 2 * se * alone_j))
        alone_ms = 1e3 * (a.t1_s - a.t0_s) / a.n
        added = added_lo = added_hi = added_ms = added_ms_hw = None
        k, occ = int(a.occ), int(a.occ)
        if len(b):
            b = b.iloc[0]
            k, occ = int(b.k), int(b.occ)
            scale = k * occ
            added = (b.e_j / b.n - plain_j) / scale
            # Bounds: the window's own, and the plain cycle's drift (conservative: added).
            lo_c = b.lo_j / b.n - (plain_j + plain_hw_j)
            hi_c = b.hi_j / b.n - (plain_j - plain_hw_j)
            added_lo, added_hi = lo_c / scale, hi_c / scale
            added_ms = (1e3 * (b.t1_s - b.t0_s) / b.n - plain_ms) / scale
            added_ms_hw = plain_ms_hw / scale
        diff = agree = None
        within_bound = False
        if added is not None and alone_j + added > 0:
            diff = 100.0 * (alone_j - added) / (0.5 * (alone_j + added))
            within_bound = bool(added_lo <= alone_j <= added_hi)
            agree = bool(abs(diff) <= AGREE_PCT or within_bound)  # a bool: `agree is False`
        max_w = _max_read_w(samples, buffer, dev, float(a.t0_s), float(a.t1_s))
        near = bool(
            power_limit_w and max_w is not None and max_w >= NEAR_LIMIT_FRAC * power_limit_w
        )
        note = ""
        if near and agree is False:
            src, rj, rlo, rhi = "added", added, added_lo, added_hi
            note = (
                f"near the power limit (read up to {max_w:.0f} W alone, limit "
                f"{power_limit_w:.0f} W): alone and added differ by {diff:+.1f} %; the added "
                "reference (priced in its step) is used"
            )
        elif agree and abs(diff) <= AGREE_PCT:
            src = "mean"
            rj = 0.5 * (alone_j + added)
            rlo, rhi = min(alo, added), max(ahi, added)
        elif agree:  # the added one is too noisy to refine the alone one, and holds it
            src, rj, rlo, rhi = "alone", alone_j, alo, ahi
            note = (
                f"added differs by {diff:+.1f} % but holds the alone figure in its bound "
                f"[{added_lo:.4g}, {added_hi:.4g}] J"
            )
        elif added is None:
            src, rj, rlo, rhi = "alone", alone_j, alo, ahi
        elif diff is None:  # the two sum to ≤ 0 J: noise around a phase that costs ~nothing
            src, rj, rlo, rhi = "disagree", None, None, None
            note = f"alone {alone_j:.4g} J and added {added:.4g} J sum to ≤ 0: no reference"
        else:
            src, rj, rlo, rhi = "disagree", None, None, None
            note = f"alone and added differ by {diff:+.1f} %: no reference"
        out[phase] = PhaseReference(
            phase, alone_j, alo, ahi, alone_ms, added, added_lo, added_hi, k, occ, diff, agree,
            max_w, near, rj, rlo, rhi, src, note, added_ms, added_ms_hw,
            *_removed(wins, phase, plain_j, plain_hw_j, plain_ms),
        )  # fmt: skip
    removed_kinds = wins.loc[wins["kind"] == "removed", "phase"].astype(str)
    groups = {
        g: _removed(wins, g, plain_j, plain_hw_j, plain_ms)
        for g in dict.fromkeys(removed_kinds)
        if "+" in g
    }
    return {
        "device": dev,
        "idle_w": idle_w,
        "plain_cycle_j": plain_j,
        "plain_cycle_ms": plain_ms,
        "plain_drift_j": drift_j,
        "phases": out,
        "removed_groups": groups,
    }


def _removed(wins, phase: str, plain_j: float, plain_hw_j: float, plain_ms: float) -> tuple:
    """(removed_j, lo, hi, removed_ms) per occurrence from the `removed` window of `phase`
    (the step without it), or Nones where there is none. Its bound: the window's own and the
    plain cycle's (its drift and counter bound, `plain_hw_j`)."""
    r = wins[(wins["kind"] == "removed") & (wins["phase"] == phase)]
    if not len(r):
        return None, None, None, None
    r = r.iloc[0]
    occ = max(int(r.occ), 1)
    e = (plain_j - r.e_j / r.n) / occ
    lo = (plain_j - plain_hw_j - r.hi_j / r.n) / occ
    hi = (plain_j + plain_hw_j - r.lo_j / r.n) / occ
    ms = (plain_ms - 1e3 * (r.t1_s - r.t0_s) / r.n) / occ
    return float(e), float(lo), float(hi), float(ms)


def _time_se_rel(spans, phase: str, t0: float, t1: float) -> float:
    """The relative standard error of the mean time of `phase`'s calls inside [t0, t1] (from
    the ref run's spans; 0 where there are none)."""
    if spans is None:
        return 0.0
    s = spans[(spans["phase"] == phase) & (spans["t0_s"] >= t0) & (spans["t1_s"] <= t1)]
    d = (s["t1_s"] - s["t0_s"]).to_numpy(float)
    if len(d) < 3 or d.mean() <= 0:
        return 0.0
    return float(d.std(ddof=1) / d.mean() / np.sqrt(len(d)))


def _plain_halfwidth(plain) -> float:
    """Half the widest plain window's counter bound, per cycle."""
    hw = (plain["hi_j"] - plain["lo_j"]) / 2 / plain["n"]
    return float(hw.max()) if len(hw) and math.isfinite(hw.max()) else 0.0
