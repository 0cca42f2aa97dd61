"""benchmarks/ref_loops_eval.py with two regression variants: the default and
RegressionConfig.floor_at_idle. Run from the repository root:

    PYTHONPATH=src python3 benchmarks/results/ref_loops/h200/tried_floor_at_idle/eval_floor.py \
        benchmarks/results/ref_loops/h200 --variants --out OUT
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import ref_loops_eval as e  # noqa: E402

e.VARIANTS.clear()
e.VARIANTS.update({"regression": {}, "regression_floor": {"floor_at_idle": True}})
sys.exit(e.main(sys.argv[1:]))
