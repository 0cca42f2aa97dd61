#!/usr/bin/env bash
# The energy-aware study on one GPU within a time budget (see energy_aware_study.py).
#   benchmarks/energy_aware_study.sh OUT_DIR [BUDGET_S]     (run from the repository root)
set -euo pipefail
OUT=${1:?usage: benchmarks/energy_aware_study.sh OUT_DIR [BUDGET_S]}
BUDGET=${2:-300}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
export JP_COMMIT=${JP_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
python3 benchmarks/energy_aware_study.py --out "$OUT" --budget-s "$BUDGET"
