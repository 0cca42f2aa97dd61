"""What PEFT saves, from a probe.csv: per model, each method's training memory, seconds and joules
per step against full fine-tuning at the same precision, batch and checkpointing.

    python benchmarks/video_probe_savings.py benchmarks/results/video_probe/probe/probe.csv \
        --out benchmarks/results/video_probe/savings

Ratios of joules carry bounds from the cells' own energy bounds (lo_method / hi_full,
hi_method / lo_full: both cells' counter brackets at once). Seconds and memory are single
measurements (one cell each).

With `--repeat REPEAT.csv` (a second probe.csv that measured some of the same cells again, in
other processes), the spread between repeated cells is estimated from the pairs and each
energy ratio also gets a 95 % interval that holds it: the counter brackets widened by the
repeat spread of both cells (`j_vs_full_rep_lo`, `j_vs_full_rep_hi`). A saving is established
only where that interval excludes 1.

    python benchmarks/video_probe_savings.py benchmarks/results/video_probe/probe/probe.csv \
        --repeat benchmarks/results/video_probe/repeat/probe.csv \
        --out benchmarks/results/video_probe/savings

With at least MIN_RATIO_PAIRS ratios measured in both tables (a whole second table), the
ratios' own spread between the tables is used instead of the cells' (what moves both cells of a
ratio alike, such as one session's host pace, cancels in the ratio), and each s/step ratio gets
a 95 % interval too.

Writes OUT.csv and OUT.md (and with --repeat, OUT_repeat.json: the pairs and the spread).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from jouleprof.report.probe_savings import write  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe_csv", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="OUT.csv and OUT.md are written")
    ap.add_argument("--repeat", type=Path, help="a probe.csv that measured some cells again")
    a = ap.parse_args(argv)
    try:
        md = write(a.probe_csv, a.out, a.repeat)
    except ValueError as e:
        print(f"video_probe_savings: {e}", file=sys.stderr)
        return 2
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
