"""A first run on a machine without an NVIDIA GPU still ends with a phase-energy table.

`jouleprof profile vjepa2 --preset tiny` trains on the CPU, records every phase's time, then
drives the package's simulated GPU with those phase times and attributes its energy: phases.csv
holds energies, every figure is labelled simulated (run.json, phases.csv, the terminal), the
regression recovers the simulated truth, and run.json says which device trained.
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


def _jouleprof(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    out = tmp_path_factory.mktemp("first") / "quickstart"
    r = _jouleprof(
        "profile",
        "vjepa2",
        "--preset",
        "tiny",
        "--duration-s",
        # The README's first run, in seconds rather than steps, so that the sensor's readings do
        # not depend on how fast this CPU runs the step: 60 steps took 1.8 s on an idle 2-core
        # CPU, whose 17 readings left every phase unresolved ("need 20") in about half the runs.
        "10",
        "--max-warmup-steps",
        "2",
        "--no-report",
        "--out",
        str(out),
    )
    return out, r


def test_cpu_run_ends_with_a_simulated_phase_energy_table(quickstart):
    out, r = quickstart
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    rec = json.loads((out / "run.json").read_text())
    assert rec["extra"]["trained_on"] == "cpu"
    sim = rec["extra"]["simulated_gpu"]
    assert sim["source"] == "simulated" and sim["device"] == "sim0"
    assert rec["summary"]["simulated_gpu_phase_energy_j"]["source"] == "simulated"
    # Real GPU figures stay unavailable: the simulation is never passed off as this machine's.
    assert rec["summary"]["gpu_energy_j"]["source"] == "unavailable"
    assert any(n.startswith("SIMULATED") for n in rec["notes"])
    # phases.csv is the regression's, with energies, each row labelled simulated
    table = pd.read_csv(out / "phases.csv")
    assert set(table["method"]) == {"regression"}
    assert set(table["source"]) == {"simulated"}
    assert (out / "phases_proportional.csv").is_file()
    assert (out / "phases_regression.csv").is_file()
    # At least the data phase (or its joint row) has its energy. On a fast idle CPU the tiny
    # step's other phases last 1-5 ms: beside neighbours fitted at impossible powers, a fixed
    # schedule read by a 100 ms sensor often cannot split them (benchmarks/results/
    # first_run_coverage, d10: 4 rows resolved per idle 10 s run, a data row in 60 of 60), and
    # each unresolved row says why.
    resolved = table[table["resolved"]]
    assert len(resolved) >= 1 and resolved["energy_j"].gt(0).all(), table.to_string()
    assert any(p == "data" or "data" in p.split("+") for p in resolved["phase"]), table
    unresolved = table[~table["resolved"]]
    assert unresolved["note"].map(lambda n: isinstance(n, str) and len(n) > 10).all()
    # The terminal shows the table, names whole, labelled simulated
    assert "SIMULATED" in r.stdout and "backward" in r.stdout
    assert "forward/context" in r.stdout


def _near_truth(row, truth: float, rel: float) -> bool:
    """The estimate within `rel` of the truth, or the truth inside the interval widened by
    half (a 95 % interval widened so holds the truth about 997 times in 1000 if it is honest:
    the test checks the claim without failing on the 1 run in 20 it allows)."""
    e, lo, hi = row["energy_j"], row["energy_lo_j"], row["energy_hi_j"]
    if abs(e - truth) <= rel * truth:
        return True
    return e - 1.5 * (e - lo) <= truth <= e + 1.5 * (hi - e)


def _table(reg: pd.DataFrame, out) -> str:
    """The whole regression table and the run's fitted powers, for a failure's message: a CI
    machine's run directory is gone by the time anyone reads it."""
    cols = ["time_s", "energy_j", "energy_lo_j", "energy_hi_j", "true_energy_j", "resolved"]
    spans = pd.read_csv(out / "spans.csv")
    ms = (1e3 * (spans["t1_s"] - spans["t0_s"])).groupby(spans["phase"]).mean().round(2)
    return (
        reg[cols].to_string()
        + "\nnotes:\n"
        + "\n".join(f"{p}: {n}" for p, n in reg["note"].items())
        + f"\nmean span ms: {ms.to_dict()}"
    )


def test_regression_recovers_the_simulated_truth_and_time_share_does_not(quickstart):
    out, _ = quickstart
    reg = pd.read_csv(out / "phases_regression.csv").set_index("phase")
    why = _table(reg, out)
    prop = pd.read_csv(out / "phases_proportional.csv").set_index("phase")
    # How many phases are split depends on how fast this CPU runs the tiny step (an idle CPU
    # gives ~10 ms phases, which 60 steps of one schedule may not split). Each phase is then
    # near its truth (within 5 %, or inside its interval: on an idle 2-core CPU a 30-step run's
    # data phase came out +6.2 % inside [-3.2, +13.1] %) or unresolved with its reason. Where a
    # loaded CPU leaves the forward's own time next to nothing (seen at load 15: forward fitted
    # at 3517 W), the data phase is unresolved and measured jointly with its neighbour; that
    # joint row is then near their summed truth. Never far off: within 15 %.
    d = reg.loc["data"]
    if d["resolved"]:
        assert _near_truth(d, d["true_energy_j"], 0.05), why
        # Within 15 %, or inside its own interval where that claims no better: a CPU loaded by
        # other work stretched the data phase to 39 ms and gave -18 % inside its ±35 %.
        inside = d["energy_lo_j"] <= d["true_energy_j"] <= d["energy_hi_j"]
        assert inside or d["energy_j"] == pytest.approx(d["true_energy_j"], rel=0.15), why
    else:
        assert isinstance(d["note"], str) and d["note"], d
        joint = [p for p in reg.index if "+" in p and "data" in p.split("+")]
        assert joint, reg[["resolved", "note"]]
        j = reg.loc[joint[0]]
        assert j["resolved"]
        truth = sum(reg.loc[p, "true_energy_j"] for p in joint[0].split("+"))
        assert _near_truth(j, truth, 0.05), why
    b = reg.loc["backward"]
    if b["resolved"]:
        assert _near_truth(b, b["true_energy_j"], 0.03), why
    else:
        assert pd.isna(b["energy_j"]) and isinstance(b["note"], str) and b["note"], why
    # data (110 W) beside backward (600 W): splitting by time share misses the data phase
    d = prop.loc["data"]
    assert abs(d["energy_j"] - d["true_energy_j"]) > 0.5 * d["true_energy_j"]


def test_the_missing_gpus_reason_is_said_once(quickstart):
    out, r = quickstart
    rec = json.loads((out / "run.json").read_text())
    reason = rec["summary"]["gpu_energy_j"]["reason"]
    # printed once as a numbered note, then referred to
    assert r.stderr.count(reason[:40]) == 1, r.stderr


def test_attribute_on_the_simulated_run_labels_it(quickstart):
    out, _ = quickstart
    r = _jouleprof("attribute", str(out), "--method", "proportional")
    assert r.returncode == 0, r.stderr
    assert "SIMULATED" in r.stdout and "SIMULATED" in r.stderr
    assert "simulated" in r.stdout  # the truth column
    table = pd.read_csv(out / "phases_proportional.csv")
    assert set(table["source"]) == {"simulated"} and table["true_energy_j"].notna().any()
    # phases.csv stays the regression's
    assert set(pd.read_csv(out / "phases.csv")["method"]) == {"regression"}
