"""Each signal's refresh grid with its jitter, for regression (see sensors/refresh_fit.py).

On an H200 the energy counter and the power fields tick on grids of their own; regression needs
both, each refitted with the spread of its true instants around it.
"""

from __future__ import annotations

from jouleprof.sensors.refresh import detect_device_refresh
from jouleprof.sensors.refresh_fit import JitterGrid, fit_jitter_grid

__all__ = ["JitterGrid", "device_grids", "fit_jitter_grid"]


def _grid(samples, device: str, signal: str):
    """The refresh grid of `signal`, and whether it is that signal's own."""
    grid = detect_device_refresh(samples, device, signal=signal)
    return grid, grid is not None and grid.signal == signal


def device_grids(
    samples, dev, use_counter: bool = True, use_power: bool = True
) -> tuple[dict[str, JitterGrid], list[str]]:
    """The counter's grid and the power fields' grid, each refitted with its jitter; notes."""
    out: dict[str, JitterGrid] = {}
    notes: list[str] = []
    t = dev["t_s"].to_numpy(float)
    device = str(dev["device"].iloc[0])
    power_col = "power_instant_w" if dev["power_instant_w"].notna().any() else "power_w"
    wanted = [("counter", "energy_j", use_counter), ("power", power_col, use_power)]
    for name, col, use in wanted:
        if not use or col not in dev.columns or dev[col].notna().sum() < 10:
            continue
        grid, own = _grid(samples, device, col)
        if grid is None:
            continue
        if name == "counter" and not own:
            # Its refreshes cannot be placed (read too rarely): a counter value could belong
            # to any instant of the period before its read. Its rows are left out.
            notes.append(
                "the energy counter was read too rarely to place its refreshes: regression "
                "used the power readings only (record in fine mode: a counter read per refresh)"
            )
            continue
        out[name] = fit_jitter_grid(t, dev[grid.signal].to_numpy(float), grid)
    return out, notes
