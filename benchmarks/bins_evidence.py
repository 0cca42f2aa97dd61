"""How much a run's own readings support cutting long phases into bins, offline.

    PYTHONPATH=src python3 benchmarks/bins_evidence.py RUN_DIR... [--out FILE.md]

Per run directory (a fine run of the reference loops, a V-JEPA2 attribution run), the default
regression's bins choice: the residual RMS per degree of freedom with one power per phase and
with long phases cut into bins, and the evidence for the bins as Δχ² = blocks × (RMS_whole² /
RMS_binned² − 1), counted in the independent blocks of rows the bootstrap uses (as the buffer
window's Δχ² is, `regression_choice.window_support`). For nested least-squares models this is
the same test as one on the bins' powers against their spread: a bin-power difference is
significant only where the residuals fall by as much.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def evidence(run_dir: Path) -> dict:
    from jouleprof.attribution import attribute
    from jouleprof.attribution.regression_choice import n_blocks

    res = attribute(run_dir, "regression").devices[0]
    choice = res.diagnostics.get("bins_choice") or {}
    rms = choice.get("residual_rms_w") or {}
    row = {"run": str(run_dir), "kept": bool(res.diagnostics.get("bins"))}
    if not rms:
        return {**row, "why": "no bins tried (no phase long enough to cut)"}
    blocks = n_blocks(res)
    chi2 = blocks * (rms["whole"] ** 2 / rms["binned"] ** 2 - 1.0)
    return {
        **row,
        "rms_whole_w": rms["whole"],
        "rms_binned_w": rms["binned"],
        "ratio": rms["binned"] / rms["whole"],
        "blocks": blocks,
        "chi2": chi2,
    }


def table(rows: list[dict]) -> str:
    out = [
        "| run | bins | RMS/dof whole (W) | binned (W) | ratio | blocks | Δχ² |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "chi2" not in r:
            out.append(f"| {r['run']} | {r['why']} | | | | | |")
            continue
        out.append(
            f"| {r['run']} | {'kept' if r['kept'] else 'not kept'} | {r['rms_whole_w']:.1f} | "
            f"{r['rms_binned_w']:.1f} | {r['ratio']:.3f} | {r['blocks']:.1f} | {r['chi2']:.2f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    rows = []
    for run in args.runs:
        if not (run / "run.json").is_file():
            print(f"{run}: no run.json (name a run directory)", file=sys.stderr)
            return 2
        rows.append(evidence(run))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    md = table(rows)
    if args.out:
        args.out.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
