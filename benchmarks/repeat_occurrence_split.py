"""Does a replayed phase's second run cost what its first does? Re-attribute a fine run whose
steps repeat a phase (`PhaseRecorder.replay` with a RepeatConfig) with each step's second
occurrence of that phase relabelled `<phase>#2`, so that the first run (after the phase before
it) and the repeat (after its own first run) each get their own power. Offline, any machine.

    PYTHONPATH=src python3 benchmarks/repeat_occurrence_split.py FINE_DIR PHASE [...] --out F.csv

Both fits leave the power buffer's rows out (the repeat rule's default for the plain one, set
for the split one, where no phase repeats any more), so that only the labels differ.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd


def _rows(res, label: str, fine: Path) -> list[dict]:
    dev = res.devices[0]
    rows = []
    for p in dev.phases:
        rows.append({
            "run": str(fine), "fit": label, "phase": p.phase, "resolved": p.resolved,
            "mean_power_w": p.mean_power_w, "time_ms_per_step": 1e3 * p.time_s / dev.n_steps,
            "j_per_step": None if p.energy_j is None else p.energy_j / dev.n_steps,
            "half_width_pct": None if p.energy_j is None or not p.energy_j
            else 50.0 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j,
        })  # fmt: skip
    return rows


def split_run(fine: Path, phase: str) -> list[dict]:
    from jouleprof.attribution import attribute
    from jouleprof.attribution.repeat_check import relabel_replays

    plain = attribute(fine, "regression", use_buffer=False)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "split"
        shutil.copytree(fine, work)
        spans = pd.read_csv(fine / "spans.csv")
        relabel_replays(spans, [phase]).to_csv(work / "spans.csv", index=False)
        split = attribute(work, "regression", use_buffer=False)
    return _rows(plain, "plain", fine) + _rows(split, "split", fine)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", help="FINE_DIR PHASE, one pair per run")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give FINE_DIR PHASE pairs")
    rows = []
    for fine, phase in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        if not (Path(fine) / "spans.csv").is_file():
            ap.error(f"{fine}: no spans.csv (give a fine run directory)")
        rows += split_run(Path(fine), phase)
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False)
    print(table.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
