"""What a repeated phase adds to its step, against one run of it, on a simulated run with
known truth (benchmarks/edge_excite_sim.py, a repeat setting): its *marginal* energy.

Repetition identifies a phase by the difference between steps that ran it twice and steps that
ran it once, so the regression reads the marginal energy: one run's own energy plus whatever its
second run changes in the others' (under a power limit, a lower-power phase lets the throttled
phases after it recover their headroom). This compares the two on the simulator's per-run
truth: steps of the repetition window that repeated only PHASE (the other replayed phases once)
against steps that repeated nothing.

    PYTHONPATH=src python3 benchmarks/repeat_marginal.py RUN_DIR... --phase loss_fp32

RUN_DIR: an edge_excite_sim run's `fine` directory (OUT/loops/<tag>/fine). Prints one line per
run: the phase's mean energy per run, the marginal step energy, and each other phase's change.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def per_step_truth(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """(runs per step and phase, true energy per step and phase, each step's start) from the
    run's spans and `extra.simulated_truth_j` (each phase's truth per run, in span order)."""
    from jouleprof.store.rundir import RunDir

    rd = RunDir(run_dir)
    truth = rd.read_record().extra["simulated_truth_j"]
    spans = rd.read_spans().sort_values("t0_s", kind="stable")
    parts = []
    for phase, values in truth.items():
        s = spans[spans["phase"] == phase].iloc[: len(values)].copy()
        s["energy_j"] = values[: len(s)]
        parts.append(s)
    occ = pd.concat(parts)
    g = occ.groupby(["step", "phase"])["energy_j"]
    runs = g.size().unstack(fill_value=0)
    energy = g.sum().unstack(fill_value=0.0)
    return runs, energy, spans.groupby("step")["t0_s"].min()


def marginal(run_dir: Path, phase: str, window_share: float = 0.75) -> dict:
    """The phase's mean true energy per run, and how much more a step of the window that ran it
    twice (and every other replayed phase once) held than a step that repeated nothing."""
    from jouleprof.store.rundir import RunDir

    replayed = RunDir(run_dir).read_record().extra["repeat"]["phases"]
    runs, energy, start = per_step_truth(run_dir)
    fine_s = float(start.max() - start.min())
    window = (start - start.min()) < window_share * fine_s
    others = [p for p in replayed if p != phase]
    once = (runs[replayed] == 1).all(axis=1) & window
    only = (runs[phase] == 2) & (runs[others] == 1).all(axis=1) & window
    per_run = float(energy[phase].sum() / runs[phase].sum())
    step_gain = float(energy[only].sum(axis=1).mean() - energy[once].sum(axis=1).mean())
    change = {
        p: float(energy.loc[only, p].mean() - energy.loc[once, p].mean())
        for p in energy.columns
        if p != phase
    }
    return {
        "per_run_j": per_run,
        "marginal_j": step_gain,
        "marginal_vs_run_pct": 100 * (step_gain / per_run - 1),
        "neighbours_change_j": change,
        "n_once": int(once.sum()),
        "n_repeated": int(only.sum()),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--phase", required=True)
    a = ap.parse_args(argv)
    for run in a.runs:
        m = marginal(run, a.phase)
        ch = ", ".join(f"{k} {v:+.4f}" for k, v in m["neighbours_change_j"].items())
        print(
            f"{run.parent.name}: {a.phase} {m['per_run_j']:.4f} J a run; a step repeating it "
            f"held {m['marginal_j']:.4f} J more ({m['marginal_vs_run_pct']:+.1f} %); others: "
            f"{ch} ({m['n_repeated']} repeated steps against {m['n_once']})"
        )


if __name__ == "__main__":
    main()
