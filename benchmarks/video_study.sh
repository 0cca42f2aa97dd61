#!/usr/bin/env bash
# The staged video study on the synthetic dataset, one GPU, within a time budget.
#   benchmarks/video_study.sh OUT_DIR [BUDGET_S]     (run from the repository root)
set -euo pipefail
OUT=${1:?usage: benchmarks/video_study.sh OUT_DIR [BUDGET_S]}
BUDGET=${2:-420}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export JP_COMMIT=${JP_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
python3 benchmarks/video_study.py --out "$OUT" --budget-s "$BUDGET"
