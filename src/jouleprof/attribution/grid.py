"""Each signal's refresh grid with its jitter, for regression (see sensors/refresh_fit.py).

On an H200 the energy counter and the power fields tick on grids of their own; regression needs
both, each refitted with the spread of its true instants around it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jouleprof.sensors.refresh import detect_device_refresh
from jouleprof.sensors.refresh_fit import JitterGrid, fit_jitter_grid

__all__ = [
    "PIECE_S",
    "JitterGrid",
    "device_grids",
    "fit_jitter_grid",
    "power_pieces",
    "with_power_pieces",
]

PIECE_S = 60.0
"""Length of a piece of a long run whose power-field grid is fitted on its own."""


def _grid(samples, device: str, signal: str):
    """The refresh grid of `signal`, and whether it is that signal's own."""
    grid = detect_device_refresh(samples, device, signal=signal)
    return grid, grid is not None and grid.signal == signal


def power_column(dev) -> str:
    """The power field the power grid is detected on: the instant field where it was read."""
    return "power_instant_w" if dev["power_instant_w"].notna().any() else "power_w"


def wanted_signals(dev, use_counter: bool = True, use_power: bool = True) -> list[tuple[str, str]]:
    """(grid name, column) of each signal whose grid `device_grids` fits, in its order."""
    wanted = [("counter", "energy_j", use_counter), ("power", power_column(dev), use_power)]
    return [
        (name, col)
        for name, col, use in wanted
        if use and col in dev.columns and dev[col].notna().sum() >= 10
    ]


def signal_grid(samples, dev, name: str, col: str) -> tuple[JitterGrid | None, list[str]]:
    """One signal's grid refitted with its jitter (None where it cannot be placed), and notes."""
    grid, own = _grid(samples, str(dev["device"].iloc[0]), col)
    if grid is None:
        return None, []
    if name == "counter" and not own:
        # Its refreshes cannot be placed (read too rarely): a counter value could belong
        # to any instant of the period before its read. Its rows are left out.
        return None, [
            "the energy counter was read too rarely to place its refreshes: regression "
            "used the power readings only (record in fine mode: a counter read per refresh)"
        ]
    t = dev["t_s"].to_numpy(float)
    return fit_jitter_grid(t, dev[grid.signal].to_numpy(float), grid), []


def device_grids(
    samples, dev, use_counter: bool = True, use_power: bool = True
) -> tuple[dict[str, JitterGrid], list[str]]:
    """The counter's grid and the power fields' grid, each refitted with its jitter; notes."""
    out: dict[str, JitterGrid] = {}
    notes: list[str] = []
    for name, col in wanted_signals(dev, use_counter, use_power):
        grid, more = signal_grid(samples, dev, name, col)
        notes += more
        if grid is not None:
            out[name] = grid
    return out, notes


def power_pieces(
    dev, whole: JitterGrid, piece_s: float = PIECE_S, fitted=False
) -> list[tuple[float, float, JitterGrid]] | None:
    """The power fields' grid fitted piece by piece, where one grid for the whole run does not
    hold: [(t0_s, t1_s, grid)], or None.

    The H200's power fields refresh every ~100 ms, but their period moves with the load: over
    run6's 366 s (benchmarks/results/attr_vith_b8) one grid fitted 30 ms of jitter and only 8 of
    3,553 readings could be placed on it, while 60 s pieces had periods of 100.162, 100.230
    and 100.205 ms. Pieces are used for runs of at least two pieces whose single grid jitters
    by more than 3 ms, when they halve the jitter (the median piece's against the whole's).
    `fitted`: `fit_pieces(dev, whole.grid.signal, piece_s)` if already computed.
    """
    t = dev["t_s"].to_numpy(float)
    col = whole.grid.signal
    if col not in dev.columns or len(t) == 0:
        return None
    if not pieces_possible(dev, piece_s) or not whole.jitter_s > 3e-3:
        return None
    pieces = fit_pieces(dev, col, piece_s) if fitted is False else fitted
    if pieces is None or np.median([g.jitter_s for _, _, g in pieces]) > 0.5 * whole.jitter_s:
        return None
    return pieces


def pieces_possible(dev, piece_s: float = PIECE_S) -> bool:
    """Whether the run spans the two pieces `power_pieces` needs at the least."""
    t = dev["t_s"].to_numpy(float)
    return len(t) > 0 and float(t.max() - t.min()) >= 2 * piece_s


def fit_pieces(
    dev, col: str, piece_s: float = PIECE_S
) -> list[tuple[float, float, JitterGrid]] | None:
    """The grid of `col` fitted in each piece of ~piece_s of the run: [(t0_s, t1_s, grid)], or
    None where a piece's refreshes cannot be detected on `col` itself."""
    t = dev["t_s"].to_numpy(float)
    span = float(t.max() - t.min())
    n = int(round(span / piece_s))
    edges = np.linspace(float(t.min()), float(t.max()), n + 1)
    device = str(dev["device"].iloc[0])
    pieces = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        sub = dev[(t >= a) & (t <= b)]
        est = detect_device_refresh(sub, device, signal=col)
        if est is None or est.signal != col:
            return None
        g = fit_jitter_grid(sub["t_s"].to_numpy(float), sub[col].to_numpy(float), est)
        pieces.append((float(a), float(b), g))
    return pieces


def with_power_pieces(
    dev, grids: dict[str, JitterGrid], notes: list[str], piece_s: float, fitted=False
):
    """(grids, notes, pieces): where `power_pieces` applies, the power grid's jitter and its
    error become the widest piece's (the ceiling of a row's blur and the σ perturbation; each
    row's own blur is its piece's), with a note; otherwise all as given and pieces None.
    `fitted`: the pieces of the power grid's column, if already fitted (`fit_pieces`)."""
    if "power" not in grids:
        return grids, notes, None
    whole = grids["power"]
    pieces = power_pieces(dev, whole, piece_s, fitted)
    if not pieces:
        return grids, notes, None
    widest = dataclasses.replace(
        whole,
        jitter_s=max(g.jitter_s for _, _, g in pieces),
        jitter_se_s=max(g.jitter_se_s for _, _, g in pieces),
    )
    jit = [1e3 * g.jitter_s for _, _, g in pieces]
    note = (
        f"the power fields' grid was fitted in {len(pieces)} pieces of ~"
        f"{pieces[0][1] - pieces[0][0]:.0f} s: one grid for the whole run jittered by "
        f"{1e3 * whole.jitter_s:.0f} ms, the pieces by {min(jit):.0f}–{max(jit):.0f} ms "
        "(their refresh period moves with the load)"
    )
    return {**grids, "power": widest}, [*notes, note], pieces
