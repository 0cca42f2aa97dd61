"""`jouleprof profile` and `jouleprof study` end to end on the CPU (tiny V-JEPA2), with reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import jouleprof_many

pytest.importorskip("torch")
pytest.importorskip("av")

JP = [sys.executable, "-m", "jouleprof.cli.main"]


def run(*args, timeout=600):
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=timeout)


def test_profile_writes_a_run_directory_and_a_report(tmp_path):
    out = tmp_path / "run"
    r = run(
        "profile",
        "vjepa2",
        "--preset",
        "tiny",
        "--steps",
        "4",
        "--overhead-pairs",
        "3",
        "--overhead-block-steps",
        "1",
        "--num-workers",
        "0",
        "--max-warmup-steps",
        "2",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "run.json").read_text())
    assert rec["extra"]["warmup_steps"] == 2
    assert rec["extra"]["overhead"]["steps_per_arm"] == 3  # 3 pairs of one-step blocks
    assert rec["status"] == "complete"
    assert rec["summary"]["throughput_samples_per_s"]["value"] > 0
    assert (out / "report.html").stat().st_size > 1000
    assert (out / "spans.csv").read_text().count("\n") > 4 * 7


def test_study_runs_a_cell_per_gpu_resumes_and_reports(tmp_path):
    out = tmp_path / "study"
    args = (
        "study",
        "vjepa2",
        "--preset",
        "tiny",
        "--batch-sizes",
        "1,2",
        "--modes",
        "baseline,fine",
        "--reps",
        "1",
        "--duration-s",
        "1",
        "--overhead-pairs",
        "0",
        "--set",
        "num_workers=0",
        # A CPU's step times rarely settle: without a cap each cell waits out 50 warm-up steps.
        "--max-warmup-steps",
        "2",
        # Two cells at once, each told its own GPU (here no GPU trains: each sees its index).
        "--parallel-gpus",
        "0,1",
        "--out",
        str(out),
    )
    r = run(*args)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out / "runs.csv")
    assert list(df["cell_id"]) == [
        "bs1-baseline-r0",
        "bs1-fine-r0",
        "bs2-baseline-r0",
        "bs2-fine-r0",
    ]
    assert (df["status"] == "complete").all(), df[["cell_id", "status", "error"]]
    wall = pd.read_csv(out / "cell_wall.csv")
    assert sorted(wall["cell_id"]) == sorted(df["cell_id"]) and set(wall["gpu"]) == {0, 1}
    for cell, gpu in zip(wall["cell_id"], wall["gpu"], strict=True):
        rec = json.loads((out / "cells" / cell / "run.json").read_text())
        assert str(rec["environment"].get("cuda_visible_devices")) == str(gpu), rec["environment"]
        assert rec["extra"]["warmup_steps"] == 2  # the cap reached every cell
    assert (out / "report.html").is_file()
    # Rerunning the same command resumes: nothing is redone.
    r = run(*args)
    assert r.returncode == 0 and r.stderr.count("(done before)") == 4


BAD = [
    (("--preset", "vit_gigantic"), "vit_huge"),
    (("--modes", "turbo"), "baseline, e2e, fine"),
    (("--batch-sizes", "a,b"), "comma-separated integers"),
    (("--set", "compile=maybe"), "compile must be true or false"),
    (("--set", "nosuch=1"), "valid fields"),
    (("--max-warmup-steps", "1"), "max_warmup_steps must be ≥ 2"),
    (("--parallel-gpus", "0,0"), "distinct"),
]


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory):
    """Every BAD study command's result, all run in one process (jouleprof_many)."""
    tmp = tmp_path_factory.mktemp("bad")
    commands = [["study", "vjepa2", "--out", tmp / f"s{i}", *a] for i, (a, _) in enumerate(BAD)]
    return tmp, jouleprof_many(commands)


@pytest.mark.parametrize(("i", "message"), [(i, m) for i, (_, m) in enumerate(BAD)],
                         ids=[" ".join(a) for a, _ in BAD])  # fmt: skip
def test_study_bad_input_lists_what_is_valid(bad_results, i, message):
    tmp, results = bad_results
    r = results[i]
    assert r.returncode != 0
    assert message in r.stderr + r.stdout
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp / f"s{i}" / "runs.csv").exists()


def test_set_parses_json_values():
    from jouleprof.cli.study import parse_overrides

    assert parse_overrides(["compile=True", "grad_accum_steps=4", "optimizer_impl=foreach"]) == {
        "compile": True,
        "grad_accum_steps": 4,
        "optimizer_impl": "foreach",
    }
