"""`jouleprof profile --excite`: the built-in workloads with the opt-in excitation.

The measured steps get short random gaps before their phases (recorded as phase `excite_gap`,
listed in run.json), the attribution fits the gaps like any phase and says what they cost, and
a mode that records no phases refuses the flag in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import gpu_available

pytestmark = pytest.mark.skipif(gpu_available(), reason="a GPU is measured here: no simulation")


def _jouleprof(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_an_excited_run_records_its_gaps_and_says_what_they_cost(tmp_path):
    out = tmp_path / "excited"
    r = _jouleprof("profile", "vjepa2", "--preset", "tiny", "--duration-s", "6", "--excite",
                   "--max-warmup-steps", "2", "--no-report", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    spans = pd.read_csv(out / "spans.csv")
    gaps = spans[spans["phase"] == "excite_gap"]
    rec = json.loads((out / "run.json").read_text())
    ex = rec["extra"]["excite"]
    assert len(gaps) == ex["n_gaps"] > 0 and set(gaps["step"]) == set(ex["excited_steps"])
    # gaps come between phases, never before a step's first (its data phase)
    first = spans.sort_values("t0_s").groupby("step")["phase"].first()
    assert (first != "excite_gap").all()
    # the attribution fits the gap, and says what the gaps cost on the simulated GPU
    table = pd.read_csv(out / "phases_regression.csv")
    assert "excite_gap" in set(table["phase"])
    costs = rec["extra"]["attribution"]["regression"].get("costs", [])
    assert len(costs) == 1 and costs[0].startswith("sim0: excitation cost: "), costs
    assert "excitation cost: " in r.stderr


def test_excitation_needs_fine_mode(tmp_path):
    r = _jouleprof("profile", "vjepa2", "--mode", "e2e", "--excite", "--steps", "2",
                   "--out", str(tmp_path / "e2e"))  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--excite need --mode 'fine'" in r.stderr, r.stderr  # the flags, as typed
