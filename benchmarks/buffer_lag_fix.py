"""Offline: how a fine run's phases move with the power buffer's lag held fixed, and what the
run fits when it refines the lag itself.

    PYTHONPATH=src python3 benchmarks/buffer_lag_fix.py RUN_DIR [--lags-ms 1,3,5,7,9]

For each lag: each phase's energy per occurrence and the residual RMS of each kind of row
(counter, instant field, power buffer); then the default fit's own lag and its posterior σ,
and the fit without the buffer's rows. The run must hold power_buffer.csv.
"""

from __future__ import annotations

import argparse

from jouleprof.attribution.api import attribute


def _line(res) -> str:
    phases = "  ".join(
        f"{p.phase} {p.energy_j / p.n_steps:.3f} J" if p.energy_j is not None else f"{p.phase} -"
        for p in res.phases
    )
    rows = res.diagnostics.get("rows", {})
    resid = ", ".join(f"{k} {v['residual_rms_w']:.1f} W" for k, v in rows.items())
    return f"{phases}   residual RMS: {resid}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--lags-ms", default="1,3,5,7,9")
    ap.add_argument("--device", default="gpu0")
    args = ap.parse_args()
    for lag_ms in (float(x) for x in args.lags_ms.split(",")):
        res = attribute(args.run, "regression", device=args.device, buffer_lag_s=lag_ms / 1e3,
                        buffer_lag_sd_s=0.0).devices[0]  # fmt: skip
        print(f"lag {lag_ms:4.1f} ms fixed   {_line(res)}")
    res = attribute(args.run, "regression", device=args.device).devices[0]
    buf = res.diagnostics.get("buffer")
    if buf is None:
        print("the run has no power-buffer rows")
        return
    lag, sd = 1e3 * buf["lag_fitted_s"], 1e3 * buf["lag_sd_s"]
    print(f"lag {lag:4.1f} ms fitted (σ {sd:.1f} ms)   {_line(res)}")
    res = attribute(args.run, "regression", device=args.device, use_buffer=False).devices[0]
    print(f"without the buffer's rows   {_line(res)}")


if __name__ == "__main__":
    main()
