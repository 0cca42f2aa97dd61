"""Offline experiment on a fine run: does the stall model's one shared stall power misprice a
phase's stretched time? Each phase holding at least SHARE of all stall time gets its own stall
column (its stretched time at its own fitted power), and the regression is refitted with it.

    PYTHONPATH=src python3 benchmarks/stall_per_phase.py RUN_DIR [SHARE=0.25]

It patches the regression's stall split in this process only (an experiment, not an option of
the package), and prints each phase's energy per occurrence and every fitted power.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

import jouleprof.attribution.regression as regression
import jouleprof.attribution.stall as stall
from jouleprof.attribution.api import attribute


@dataclass(frozen=True)
class OwnStallSplit(stall.StallSplit):
    """A stall split where the phases in `own` price their stall time with their own column."""

    own: tuple[str, ...] = ()

    def terms(self, names, col_of):
        idx = [col_of[n] for n in names]
        t = [self.work_s.get(n, self.timeline.time_s.get(n, 0.0)) for n in names]
        shared = 0.0
        for n in names:
            s = self.stall_s.get(n, 0.0)
            c = col_of.get(f"stall@{n}")
            if s > 0 and c is not None:
                idx.append(c)
                t.append(s)
            else:
                shared += s
        if shared > 0 and stall.STALL in col_of:
            idx.append(col_of[stall.STALL])
            t.append(shared)
        return idx, np.array(t)


def own_stall_split(share: float):
    shared_split = stall.split_stalls

    def split(tl, quantile=0.05):
        base = shared_split(tl, quantile)
        total = sum(base.stall_s.values()) or 1.0
        own = [n for n, s in base.stall_s.items() if s / total >= share]
        btl = base.timeline
        names = [*btl.names, *(f"stall@{n}" for n in own)]
        w = np.zeros((btl.weights.shape[0], len(names)))
        w[:, : btl.weights.shape[1]] = btl.weights
        shared_col = btl.names.index(stall.STALL)
        for n in own:
            rows = btl.labels == btl.names.index(n)
            w[rows, names.index(f"stall@{n}")] = w[rows, shared_col]
            w[rows, shared_col] = 0.0
        time_s = {**btl.time_s, **{f"stall@{n}": base.stall_s[n] for n in own}}
        time_s[stall.STALL] = float(sum(v for k, v in base.stall_s.items() if k not in own))
        tl2 = btl.relabelled(
            btl.edges_s, btl.labels, names, time_s=time_s, order=list(btl.order), weights=w
        )
        return OwnStallSplit(tl2, base.work_s, base.stall_s, base.work_per_step_s, tuple(own))

    return split


def main() -> None:
    run = sys.argv[1]
    share = float(sys.argv[2]) if len(sys.argv) > 2 else 0.25
    regression.split_stalls = own_stall_split(share)
    r = attribute(run, "regression", device="gpu0").devices[0]
    for p in r.phases:
        if p.energy_j is None:
            print(f"  {p.phase:14s} unresolved")
            continue
        hw = 100 * (p.rel_halfwidth or 0.0)
        print(f"  {p.phase:14s} {p.energy_j / p.n_steps:8.3f} J per occurrence  ±{hw:.1f} %")
    powers = r.diagnostics.get("fitted_power_w") or {}
    print("  fitted powers (W):", {k: round(v) for k, v in powers.items()})


if __name__ == "__main__":
    main()
