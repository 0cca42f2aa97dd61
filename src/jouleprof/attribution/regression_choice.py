"""Which regression model a run gets: one power per phase or the stall model, long phases whole
or cut into bins, each chosen by how well it explains the readings (pure functions of fits).

`choose_model` takes a function that fits the run under a `RegressionConfig` (the grids and
rows found once, `regression.attribute_regression`) and settles what the config leaves open
(`stall_model=None`, `bins=None`): the stall model where its residual RMS is below
STALL_KEEP_RATIO × the plain model's (`attribution.stall`); then, on that model, bins where
their residual per degree of freedom is below BIN_KEEP_RATIO × the unbinned one's and every
bin is covered by `min_rows` intervals (`attribution.bins`). Each choice is recorded in the
result's diagnostics ("stall_model_choice", "bins_choice") and notes.

Every choice is made on point fits (`RegressionConfig.intervals` False: no bootstrap, no
sensor-model spread), which give the same powers and residuals as full fits; only the model
finally chosen is fitted with its intervals, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from jouleprof.attribution.bins import bin_counts
from jouleprof.attribution.common import Timeline
from jouleprof.attribution.parallel import discard, prefetch, speculate
from jouleprof.attribution.regression_config import RegressionConfig
from jouleprof.attribution.result import DeviceAttribution, pct_text, unresolved
from jouleprof.attribution.rows import BUFFER, KIND_NAMES
from jouleprof.attribution.stages import stage
from jouleprof.errors import AttributionError

BUFFER_WINDOW_EXTENSIONS = 2
"""Where the buffer's rows fit best at the shortest or longest window tried, the fit tries up
to this many lengths further out (each the same ratio beyond the last): on two of six H200
runs the longest of the configured lengths (75 ms) fitted best."""

WINDOW_FROM_RESIDUALS = True
"""Where True, how much the buffer window's length is worth to each phase comes from the run's
own residuals where they clearly reject a neighbouring length (Δχ² above WINDOW_CLEAR_CHI2:
its residuals' excess over the best length's, in independent blocks of rows): that
neighbour's move then counts by 3/√Δχ², its 3 σ, and the window's systematic spread is at most
3 σ of the length the residuals allow (`window_support`). Where the residuals are as flat as on
the H200 V-JEPA2 runs (Δχ² 1-5), nothing changes: the full move and ±25 % stay."""
WINDOW_CLEAR_CHI2 = 9.0
"""Δχ² (3 σ²) above which the run's residuals reject a neighbouring buffer-window length."""

INTERVAL_ONLY_NOTES = ("buffer lag: ",)
"""Notes only a fit with intervals writes (`regression`'s lag profile): the final fit keeps
them where it takes the point fit's notes as its own."""

BUFFER_ROWS = KIND_NAMES[BUFFER]
"""The power buffer's rows, as the fit's diagnostics name them."""

Fit = Callable[[RegressionConfig], DeviceAttribution]
"""Fits the run under a config whose stall_model and bins are set."""

BIN_KEEP_RATIO = 0.95
"""Auto bins: kept when their residual RMS per degree of freedom is below this fraction of the
unbinned model's. On the H200 V-JEPA2 runs the ratio was 0.70–0.85 (run4–run8, the backward's
power rising through it); on simulated steps of flat phases ~1 (more columns, the same fit)."""

STALL_KEEP_RATIO = 0.9
"""Auto stall model: kept when its residual RMS is below this fraction of the plain model's.
On the H200 V-JEPA2 runs the ratio was 0.74–0.79 (backward −5.3 → −0.4 % of isolation on
run4); on simulated steps of constant-power phases the stall model fits worse (1.07–1.10)."""


def choose_model(fit: Fit, timeline: Timeline, cfg: RegressionConfig) -> DeviceAttribution:
    """The fit under `cfg`, with the stall model and bins chosen where `cfg` leaves them None;
    where buffer rows are used, the buffer kernel's length chosen by the fit; where bins are
    used, intervals widened by how much the bins' length moves each phase.

    The choices are made on point fits; the chosen model is then fitted once with intervals
    (where `cfg.intervals`), and carries the choices' notes and diagnostics."""

    def point(c: RegressionConfig) -> DeviceAttribution:
        return fit(replace(c, intervals=False))

    bins = cfg.bins
    if bins is None and not bin_counts(timeline, cfg.bin_s):
        bins = False  # no phase long enough to cut
    first = replace(cfg, bins=bool(bins))
    if cfg.stall_model is None:  # both models at once where a pool pays (`parallel`)
        pair = [replace(first, stall_model=s, intervals=False) for s in (False, True)]
        # With cores enough, the later choices' fits too, for every outcome (`speculate`).
        binned, windows = _fits_ahead(cfg, bins)
        if not speculate(fit, pair + binned + windows) and not (
            binned and speculate(fit, pair + binned)
        ):
            prefetch(fit, pair)
    with stage("choose the stall model" if cfg.stall_model is None else "fit"):
        res = _auto_stall(point, first) if cfg.stall_model is None else point(first)
    if bins is None:
        with stage("choose bins"):
            res = _auto_bins(point, cfg, res)
    cfg = replace(cfg, bins=bool(res.diagnostics.get("bins")), stall_model=_uses_stall(res))
    window = None
    if BUFFER_ROWS in res.diagnostics.get("rows", {}) and cfg.buffer_window_scales:
        scales = sorted(set(cfg.buffer_window_scales) - {1.0})
        scaled = [replace(cfg, buffer_window_s=s * cfg.buffer_window_s) for s in scales]
        prefetch(fit, [replace(c, intervals=False) for c in scaled])  # at once (`parallel`)
        with stage("choose the buffer window"):
            window = _search_buffer_window(point, cfg, res)
        cfg = window.cfg
        if WINDOW_FROM_RESIDUALS and window.neighbours:
            chi2 = window_support(window, n_blocks(res))
            sd = max(
                abs(np.log(sc / window.best)) * _clear_weight(c) if c > WINDOW_CLEAR_CHI2 else 1.0
                for sc, c in chi2.items()
            )
            cfg = replace(cfg, buffer_window_rel_sd=float(min(cfg.buffer_window_rel_sd, sd)))
            window.cfg = cfg
    if cfg.intervals and cfg.bins and cfg.bin_resolution_check:  # beside the bin-length check
        prefetch(fit, [cfg, replace(cfg, bin_s=2 * cfg.bin_s, intervals=False)])
    with stage("fit the chosen model"):
        final = fit(cfg) if cfg.intervals else res
    if final is not res:
        if window is None or window.best == 1.0:
            # Its own notes (as the point fit's) and the choices', and what only a fit with
            # intervals finds (`lag_profile`).
            own = [n for n in final.notes if n.startswith(INTERVAL_ONLY_NOTES)]
            final.notes[:] = res.notes + own
        else:
            final.notes += [n for n in res.notes if n.startswith(("model: ", "bins: "))]
        for key in ("stall_model_choice", "bins_choice"):
            if key in res.diagnostics:
                final.diagnostics[key] = res.diagnostics[key]
    elif window is not None and window.best != 1.0:
        final = point(cfg)
        for key in ("stall_model_choice", "bins_choice"):
            if key in res.diagnostics:
                final.diagnostics[key] = res.diagnostics[key]
        final.notes += [n for n in res.notes if n.startswith(("model: ", "bins: "))]
    if window is not None:
        _widen_by_buffer_window(final, window)
    unkept = final.diagnostics.get("bins_choice", {}).get("moved_j")
    if unkept and not final.diagnostics.get("bins"):
        _widen_by_unkept_bins(final, unkept, cfg.bin_s)
    if final.diagnostics.get("bins") and cfg.bin_resolution_check:
        with stage("check the bin length"):
            final = _widen_by_bin_length(point, cfg, final)
    discard(fit)
    return final


def _fits_ahead(
    cfg: RegressionConfig, bins: bool | None
) -> tuple[list[RegressionConfig], list[RegressionConfig]]:
    """The point fits the bins choice and the buffer window's search will ask for, for each
    outcome of the stall choice (and of the bins choice), keyed as they ask for them: (the
    binned fit of either model, where bins are chosen; the buffer window's other lengths for
    each (model, bins) pair, where the run may have buffer rows)."""
    stalls = (False, True) if cfg.stall_model is None else (bool(cfg.stall_model),)
    binned = []
    if bins is None:
        binned = [replace(cfg, bins=True, stall_model=s, intervals=False) for s in stalls]
    windows = []
    if cfg.use_buffer is not False and cfg.buffer_window_scales:
        scales = sorted(set(cfg.buffer_window_scales) - {1.0})
        for s in stalls:
            for b in (False, True) if bins is None else (bool(bins),):
                base = replace(cfg, bins=b, stall_model=s)
                windows += [
                    replace(base, buffer_window_s=sc * base.buffer_window_s, intervals=False)
                    for sc in scales
                ]
    return binned, windows


def widen_by(res: DeviceAttribution, moved_j: dict[str, float], what: str) -> dict[str, float]:
    """Widen each resolved phase's interval in `res` (in place) by how far `what` moves it
    (`moved_j`: phase → J, added in quadrature to each side's half-width); a phase whose
    interval then grows wider than its estimate is reported unresolved. Returns the moves in
    percent of the phases still resolved."""
    bounds: dict[str, tuple[float, float, float]] = {}
    for p in res.phases:
        d = moved_j.get(p.phase)
        if not p.resolved or p.energy_j is None or d is None:
            continue
        lo = p.energy_j - float(np.hypot(p.energy_j - p.energy_lo_j, d))
        hi = p.energy_j + float(np.hypot(p.energy_hi_j - p.energy_j, d))
        bounds[p.phase] = (lo, hi, d)
    return widen_to(res, bounds, what)


def widen_to(
    res: DeviceAttribution, bounds: dict[str, tuple[float, float, float]], what: str
) -> dict[str, float]:
    """Set each resolved phase's interval in `res` (in place) to `bounds` (phase → (lo J,
    hi J, how far `what` moves it, J)), its estimate unchanged and its note saying what moved
    it; a phase whose interval is then wider than its estimate is reported unresolved.
    Returns the moves in percent of the phases still resolved."""
    moved_pct: dict[str, float] = {}
    phases = []
    for p in res.phases:
        b = bounds.get(p.phase)
        if not p.resolved or p.energy_j is None or b is None:
            phases.append(p)
            continue
        lo, hi, d = b
        if hi - lo > p.energy_j:
            why = (
                f"its interval over the run [{lo:.4g}, {hi:.4g}] J, widened by how much {what} "
                f"move it ({d:.3g} J), is wider than the estimate {p.energy_j:.4g} J"
            )
            row = unresolved(p.phase, p.time_s, p.n_steps, p.method, why, p.device)
            phases.append(replace(row, estimate_j=p.energy_j, estimate_lo_j=lo, estimate_hi_j=hi,
                                  n_rows=p.n_rows, noise_hw_j=p.noise_hw_j))  # fmt: skip
            continue
        moved_pct[p.phase] = 100 * d / p.energy_j
        head, _, rest = p.note.partition("; ±")
        before = rest[rest.index("(") + 1 : -1] + "; " if "(" in rest else ""
        mine = f"{what} move it {pct_text(moved_pct[p.phase])}%" if d > 0 else f"{what} agree"
        half = 50 * (hi - lo) / p.energy_j
        note = f"{head}; ±{pct_text(half)}% ({before}{mine})"
        phases.append(replace(p, energy_lo_j=max(lo, 0.0), energy_hi_j=hi, note=note))
    res.phases[:] = phases
    return moved_pct


def _widen_by_bin_length(
    fit: Fit, cfg: RegressionConfig, res: DeviceAttribution
) -> DeviceAttribution:
    """`res` (a binned fit under `cfg`, whose bins and stall model are set as `res` was fitted)
    with each phase's interval widened by how far bins twice as long
    move its energy (δ, added in quadrature to each side's half-width).

    The bootstrap cannot see that a bin's power is not flat either: a bin straddling a power
    step inside a long phase biases the short phase beside it. On a simulated backward whose
    power steps halfway through, the 6 ms optimizer after it fell outside its interval in 2 of
    12 seeds and the EMA in 3 (tests/unit/test_attribution_bins.py); twice-as-long bins moved
    them by about as much as they missed."""
    try:
        coarse = fit(replace(cfg, bin_s=2 * cfg.bin_s))
    except AttributionError as e:
        res.notes.append(f"bin length not checked: {e}")
        return res
    other = {p.phase: p.energy_j for p in coarse.phases}
    moved = {
        p.phase: abs(other[p.phase] - p.energy_j)
        for p in res.phases
        if p.resolved and p.energy_j is not None and other.get(p.phase) is not None
    }
    moved_pct = widen_by(res, moved, f"bins of {2e3 * cfg.bin_s:g} ms")
    if moved_pct:
        most = max(moved_pct, key=moved_pct.get)
        res.notes.append(
            f"bin length: bins of {2e3 * cfg.bin_s:g} ms move the phases by up to "
            f"{pct_text(moved_pct[most])}% ({most}); each interval is widened by its own move"
        )
    res.diagnostics["bins"]["length_check"] = {"bin_s": 2 * cfg.bin_s, "moved_j": moved}
    return res


def _widen_by_unkept_bins(res: DeviceAttribution, moved_j: dict[str, float], bin_s: float):
    """`res` (fitted without bins, which were tried and not kept) with each phase's interval
    widened by how far cutting long phases into bins moved it (in quadrature), in place.

    A long phase whose power is not flat biases the short phases beside it, and a binned fit
    that does not lower the residual enough to be kept still says by how much: on simulated
    runs whose long phase stepped its power 12 % halfway, bins were not kept and the 6 ms and
    4 ms phases beside it came out −18 % and +40 %, outside ±5–8 % intervals
    (benchmarks/interval_coverage.py)."""
    moved_pct = widen_by(res, moved_j, f"bins of {1e3 * bin_s:g} ms")
    if moved_pct:
        most = max(moved_pct, key=moved_pct.get)
        res.notes.append(
            f"bins not kept, but they move the phases by up to {pct_text(moved_pct[most])}% "
            f"({most}); each interval is widened by its own move"
        )


def _buffer_rms(res: DeviceAttribution) -> float:
    """The residual RMS (W) of a fit's power-buffer rows."""
    return float(res.diagnostics["rows"][BUFFER_ROWS]["residual_rms_w"])


@dataclass
class _WindowSearch:
    """The buffer kernel's lengths tried (`_search_buffer_window`) and the one chosen."""

    cfg: RegressionConfig
    """The config at the chosen length."""
    base_window_s: float
    best: float
    """The chosen scale of the configured window."""
    rms: dict[float, float]
    """Scale → residual RMS of the buffer rows (W)."""
    neighbours: list[float]
    energy: dict[float, dict[str, float | None]]
    """The neighbouring scales' energies per phase (point fits)."""


def _search_buffer_window(fit: Fit, cfg: RegressionConfig, res: DeviceAttribution) -> _WindowSearch:
    """The buffer kernel's length chosen by the run's own buffer rows. `res` was fitted at
    cfg.buffer_window_s (scale 1); the fit is repeated at each of cfg.buffer_window_scales
    (`fit` gives point estimates), and further out where the best is at an edge
    (BUFFER_WINDOW_EXTENSIONS); the scale whose buffer rows fit best is kept
    (`_widen_by_buffer_window` then widens each phase's interval by the larger move to the
    neighbouring scales tried).

    The kernel probe could not tell exponentials of τ 8–12 ms apart, and the V-JEPA2 optimizer's
    split moved with τ on some runs (benchmarks/results/attr_vith_b8, session 7): the run's own
    20 ms samples, ~12,000 over 240 s, say which length describes them, and the neighbours' move
    says how much that choice is worth."""
    points = {1.0: res}

    def at(sc: float) -> bool:
        """Fit (point estimates) with the window × `sc` into `points`; False where it fails."""
        try:
            with stage(f"buffer window ×{sc:.3g}"):
                points[sc] = fit(replace(cfg, buffer_window_s=sc * cfg.buffer_window_s))
        except AttributionError as e:
            res.notes.append(f"buffer window ×{sc:.3g} not fitted: {e}")
            return False
        return True

    for sc in sorted(set(cfg.buffer_window_scales) - {1.0}):
        at(sc)
    rms = {sc: _buffer_rms(f) for sc, f in points.items() if BUFFER_ROWS in f.diagnostics["rows"]}
    for _ in range(BUFFER_WINDOW_EXTENSIONS):
        # A best length at the edge of those tried: try one step further out.
        tried = sorted(rms)
        best = min(rms, key=rms.get)
        if len(tried) < 2 or best not in (tried[0], tried[-1]):
            break
        sc = best * best / (tried[1] if best == tried[0] else tried[-2])  # the same ratio
        if not at(sc):
            break
        rms[sc] = _buffer_rms(points[sc])
    best = min(rms, key=rms.get)
    tried = sorted(rms)
    i = tried.index(best)
    neighbours = [tried[j] for j in (i - 1, i + 1) if 0 <= j < len(tried)]
    energy = {sc: {p.phase: _point(p) for p in points[sc].phases} for sc in neighbours}
    return _WindowSearch(
        replace(cfg, buffer_window_s=best * cfg.buffer_window_s),
        cfg.buffer_window_s,
        best,
        rms,
        neighbours,
        energy,
    )


def window_support(search, blocks: float) -> dict[float, float]:
    """Per neighbouring scale, Δχ² of the buffer rows against the best scale: blocks ×
    (rms_nb² / rms_best² − 1), the residuals' excess in independent blocks of rows (a block is
    the bootstrap's: rows inside one are correlated). A quadratic profile puts the length's
    σ at Δ / √Δχ² for a neighbour Δ away, so that neighbour's move is worth 1/√Δχ² of it."""
    r0 = search.rms[search.best]
    return {
        sc: max(blocks * (search.rms[sc] ** 2 / max(r0, 1e-9) ** 2 - 1.0), 0.0)
        for sc in search.neighbours
    }


def _point(p) -> float | None:
    """A phase's point estimate: its energy, or an unresolved phase's unreported estimate."""
    return p.energy_j if p.energy_j is not None else p.estimate_j


def _clear_weight(chi2: float) -> float:
    """A neighbour's share of its move: 1, or 3/√Δχ² where the residuals clearly reject it."""
    return 1.0 if chi2 <= WINDOW_CLEAR_CHI2 else float(3.0 / np.sqrt(chi2))


def n_blocks(res: DeviceAttribution) -> float:
    """Independent blocks of rows in a fit: its analysed time over the bootstrap's block (the
    residuals' own correlation time where longer than `block_s`; a point fit records the block
    its bootstrap would use, so the window's choice and its widening count alike)."""
    block_s = res.diagnostics.get("block_s") or 1.5
    return max(1.0, res.n_steps * res.step_time_s / block_s)


def _widen_by_buffer_window(chosen: DeviceAttribution, search: _WindowSearch) -> None:
    """Widen each phase's interval in `chosen` (fitted at the chosen buffer window) by the
    larger move to the neighbouring lengths tried (each weighed by the residuals' support
    where WINDOW_FROM_RESIDUALS), in place, and say so in a note."""
    best, rms, neighbours, energy = search.best, search.rms, search.neighbours, search.energy
    tried = sorted(rms)
    weight = {sc: 1.0 for sc in neighbours}
    if WINDOW_FROM_RESIDUALS:
        chi2 = window_support(search, n_blocks(chosen))
        weight = {sc: _clear_weight(c) for sc, c in chi2.items()}
    moved: dict[str, float] = {}
    for p in chosen.phases:
        e = _point(p)  # an unresolved phase's move too (how many steps it needs: steps_needed)
        ds = [
            weight[sc] * abs(energy[sc][p.phase] - e)
            for sc in neighbours
            if e is not None and energy[sc].get(p.phase) is not None
        ]
        if ds:
            moved[p.phase] = max(ds)
    ms = lambda sc: f"{1e3 * sc * search.base_window_s:.0f}"  # noqa: E731
    moved_pct = widen_by(
        chosen, moved, f"buffer windows of {'/'.join(ms(sc) for sc in neighbours)} ms"
    )
    edge = best in (tried[0], tried[-1]) and len(tried) > 1
    chosen.diagnostics["buffer_window_choice"] = {
        "window_s": best * search.base_window_s,
        "residual_rms_w": {f"{sc * search.base_window_s:.4g}": r for sc, r in rms.items()},
        "moved_j": moved,
        "at_edge": edge,
        "neighbour_weight": {f"{sc * search.base_window_s:.4g}": w for sc, w in weight.items()},
    }
    most = max(moved_pct, key=moved_pct.get) if moved_pct else None
    chosen.notes.append(
        f"buffer window: {ms(best)} ms fits the buffer's rows best (residual RMS "
        + ", ".join(f"{r:.2f} W at {ms(sc)} ms" for sc, r in sorted(rms.items()))
        + ")"
        + (
            f"; the neighbours move the phases by up to {pct_text(moved_pct[most])}% ({most}), "
            "and each interval is widened by its own move"
            if most
            else ""
        )
        + ("; the best is at the edge of the lengths tried" if edge else "")
    )


def _auto_bins(fit: Fit, cfg: RegressionConfig, whole: DeviceAttribution) -> DeviceAttribution:
    """The model `whole` chose (stall or plain) with long phases cut into bins; kept where it
    explains the readings clearly better."""
    choice = whole.diagnostics.get("stall_model_choice")
    try:
        binned = fit(replace(cfg, bins=True, stall_model=_uses_stall(whole)))
    except AttributionError as e:
        whole.notes.append(f"bins not fitted: {e}")
        return whole
    r_whole = _dof_rms(whole)
    r_bins = _dof_rms(binned)
    covered = binned.diagnostics["rows_per_label"]
    thin = [
        b
        for bins_ in binned.diagnostics["bins"]["members"].values()
        for b in bins_
        if covered.get(b, 0) < cfg.min_rows
    ]
    keep = binned if r_bins < BIN_KEEP_RATIO * r_whole and not thin else whole
    if choice is not None:
        keep.diagnostics["stall_model_choice"] = choice
    keep.diagnostics["bins_choice"] = {
        "chosen": keep is binned,
        "residual_rms_w": {"whole": r_whole, "binned": r_bins},
        "bins_under_min_rows": thin,
        "keep_ratio": BIN_KEEP_RATIO,
        "bin_s": cfg.bin_s,
    }
    if keep is whole and not thin and cfg.widen_by_unkept_bins:
        # Bins not kept: the phases still carry how far they would move them, an unresolved
        # phase's unreported estimate included (on the H200's user4 with its copy replayed,
        # the 6 ms spin after it came out resolved at +191 % ±50 % without bins and unresolved
        # with them: counting only resolved phases' moves left it unwidened).
        other = {p.phase: _point(p) for p in binned.phases}
        keep.diagnostics["bins_choice"]["moved_j"] = {
            p.phase: abs(other[p.phase] - p.energy_j)
            for p in whole.phases
            if p.energy_j is not None and other.get(p.phase) is not None
        }
    note = (
        f"bins: {'kept' if keep is binned else 'not kept'} (residual RMS per degree of freedom "
        f"{r_whole:.1f} W with one power per phase, {r_bins:.1f} W with long phases cut into ~"
        f"{1e3 * cfg.bin_s:g} ms bins; bins are kept below {BIN_KEEP_RATIO:g} × the first"
        + (
            f", and only where each bin has {cfg.min_rows} intervals: {len(thin)} have fewer"
            if thin
            else ""
        )
        + ")"
    )
    if keep is binned:  # the stall choice's note (the binned fit was told its model)
        keep.notes += [n for n in whole.notes if n.startswith("model: ")]
    keep.notes.append(note)
    return keep


def _uses_stall(res: DeviceAttribution) -> bool:
    """Whether `res` was fitted with the stall model (its diagnostics hold the stall column)."""
    return bool(res.diagnostics.get("stall"))


def _dof_rms(res: DeviceAttribution) -> float:
    """The fit's residual RMS per degree of freedom: √(RSS / (rows − fitted columns)), so that
    a model with more columns is not preferred for fitting noise on a short run."""
    d = res.diagnostics
    n, p = d["n_rows"], len(d["fitted_power_w"])
    return float(d["residual_rms_w"] * np.sqrt(n / max(n - p, 1)))


def _auto_stall(fit: Fit, cfg: RegressionConfig) -> DeviceAttribution:
    """Both models; the stall model where it explains the readings clearly better."""
    plain = fit(replace(cfg, stall_model=False))
    try:
        stall = fit(replace(cfg, stall_model=True))
    except AttributionError as e:
        plain.notes.append(f"stall model not fitted: {e}")
        return plain
    r_plain = plain.diagnostics["residual_rms_w"]
    r_stall = stall.diagnostics["residual_rms_w"]
    keep = stall if r_stall < STALL_KEEP_RATIO * r_plain else plain
    choice = {
        "chosen": "stall" if keep is stall else "plain",
        "residual_rms_w": {"plain": r_plain, "stall": r_stall},
        "keep_ratio": STALL_KEEP_RATIO,
    }
    keep.diagnostics["stall_model_choice"] = choice
    keep.notes.append(
        f"model: {choice['chosen']} (residual RMS {r_plain:.1f} W with one power per phase, "
        f"{r_stall:.1f} W with work plus host stalls; the stall model is kept below "
        f"{STALL_KEEP_RATIO:g} × the plain one's)"
    )
    return keep


__all__ = ["BIN_KEEP_RATIO", "STALL_KEEP_RATIO", "Fit", "choose_model"]
