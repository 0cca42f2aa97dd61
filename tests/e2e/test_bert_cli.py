"""`jouleprof study bert` and `jouleprof predict train` end to end on the CPU (one tiny BERT cell,
resumed; bad input refused with one line before any work)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

JP = [sys.executable, "-m", "jouleprof.cli.main"]
TINY = ["--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--batch", "2"]


def run(*args, timeout=600):
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=timeout)


def test_study_bert_runs_a_cell_and_resumes(tmp_path):
    out = tmp_path / "study"
    r = run("study", "bert", *TINY, "--measure-s", "0.2", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [x["cell_id"] for x in rows] == ["L1-H32-A2-S8-B2"]
    assert rows[0]["status"] == "complete"
    rec = json.loads((out / "cells" / "L1-H32-A2-S8-B2" / "run.json").read_text())
    s = rec["summary"]
    assert rec["status"] == "complete" and s["steps"]["value"] >= 3
    assert s["s_per_step"]["value"] > 0 and s["train_flops_per_step"]["value"] > 0
    # no GPU here: the energy is missing with its reason, never a zero
    assert s["j_per_step"]["value"] is None and s["j_per_step"]["reason"]
    again = run("study", "bert", *TINY, "--measure-s", "0.2", "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "done before" in again.stderr  # resumed: the cell is not run again
    rerun = json.loads((out / "cells" / "L1-H32-A2-S8-B2" / "run.json").read_text())
    assert rerun["run_id"] == rec["run_id"]
    # the study's index is a sweep `predict evaluate --train` reads; without a GPU it has no
    # energy to fit, and says so in one line
    ev = run("predict", "evaluate", "--train", "--data", str(out))
    assert ev.returncode == 2 and "Traceback" not in ev.stderr, ev.stderr[-2000:]
    assert "no complete one-GPU configuration with a measured energy" in ev.stderr
    assert "1 complete without one" in ev.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (
            ["study", "bert", *TINY, "--gpus", "3", "--strategy", "tp", "--dry-run"],
            "divisible by 3",
        ),
        (["study", "bert", *TINY, "--gpus", "2", "--dry-run"], "--strategy"),
        (["predict", "train", "--strategy", "zero"], "--strategy"),
        (["predict", "train", "--gpus", "5", "--strategy", "tp"], "divisible by 5"),
        (["predict", "train", "--gpu", "a100"], "no fitted law"),
    ],
)
def test_bad_input_is_one_line_before_any_work(tmp_path, args, words):
    r = run(*args, timeout=120)
    assert r.returncode != 0
    assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
