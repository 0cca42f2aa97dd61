"""benchmarks/lag_scan.py on a committed H200 fine run: a misaligned timeline fits worse."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "results" / "attr_vith_b8" / "run2"


@pytest.mark.skipif(not (RUN / "samples.csv").is_file(), reason="committed H200 run not present")
def test_shifting_spans_by_a_fifth_of_a_step_raises_the_residual(load_benchmark):
    ls = load_benchmark("lag_scan")
    assert ls._lags("-4:4:4") == [-4.0, 0.0, 4.0]
    rows = {r["lag_ms"]: r for r in ls.scan(RUN, [0.0, 40.0])}
    assert rows[40.0]["residual_rms_w"] > 1.2 * rows[0.0]["residual_rms_w"]
    assert rows[0.0]["forward/target_j"] > 0 and rows[0.0]["backward_j"] > 0
