"""benchmarks/bert_sweep_multi.py: the several-GPU plan (tensor parallelism left out where the
model does not divide), the sweep under torchrun on the CPU (2 processes, gloo, a simulated GPU
per rank) writing a row per configuration and resuming, and the factor's evaluation from it."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bert_sweep_multi.py"


def _module():
    spec = importlib.util.spec_from_file_location("bert_sweep_multi", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_plan_runs_every_strategy_and_names_what_tensor_parallelism_cannot_split():
    m = _module()
    rows2, out2 = m.plan(2)
    rows8, out8 = m.plan(8)
    assert not out2 and len(rows2) == 3 * len(m.CONFIGS)
    # heads 12 (BERT-base) do not divide by 8: only that configuration's TP row is left out
    assert [r["id"] for r in out8] == ["00-N8-L12-H768-A12-S128-B32-tp"]
    assert "not divisible by 8" in out8[0]["reason"]
    assert len({r["id"] for r in rows2}) == len(rows2)
    # whole configurations first: every strategy of one before the next
    assert [r["strategy"] for r in rows2[:3]] == ["ddp", "fsdp", "tp"]


def _run(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "JOULEPROF_RANK_WAIT_S": "60"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


pytest.importorskip("transformers")


def _smoke_rows(ranks: int, out) -> list[dict]:
    """The smoke sweep on `ranks` CPU processes into `out`; its results.csv rows."""
    r = _run("--gpus", str(ranks), "--smoke", "--out", str(out), "--budget-s", "240",
             "--est-s", "5")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    with (out / "results.csv").open() as f:
        return list(csv.DictReader(f))


def test_smoke_sweep_on_two_ranks_writes_rows_resumes_and_evaluates(tmp_path):
    out = tmp_path / "sweep"
    rows = _smoke_rows(2, out)
    planned, _ = _module().plan(2, smoke=True)
    assert sorted(x["id"] for x in rows) == sorted(p["id"] for p in planned)
    # A gloo rank was seen to abort in C++ on the 2-core CI machine (test_bert_strategies): the
    # sweep then records that configuration as failed and goes on, which is what it is for.
    failed = [x for x in rows if x["status"] != "complete"]
    assert len(failed) <= 1 and all("torchrun exited" in x["error"] for x in failed), failed
    for x in rows:
        if x["status"] != "complete":
            continue
        assert x["gpus"] == "2"
        # two simulated boards of 300 W each, both counted once
        assert float(x["avg_power_w"]) == pytest.approx(600.0, rel=0.05)
        rec = json.loads((out / "runs" / x["id"] / "run.json").read_text())
        assert rec["extra"]["distributed"]["world_size"] == 2
    # Resuming runs nothing again.
    again = _run("--gpus", "2", "--smoke", "--out", str(out), "--budget-s", "240", "--est-s", "5")
    assert again.returncode == 0 and "6 of 6 configurations have a row" in again.stdout
    with (out / "results.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    ev = _run("--evaluate", str(out), "--out", str(tmp_path / "eval"))
    assert ev.returncode == 0, ev.stderr[-2000:]
    acc = json.loads((tmp_path / "eval" / "accuracy.json").read_text())
    assert set(acc["fit_all"]) <= {"ddp", "fsdp", "tp"} and acc["fit_all"]
    assert "leave one out, 2 GPUs" in (tmp_path / "eval" / "accuracy.md").read_text()
    block = json.loads((tmp_path / "eval" / "law_multi_gpu.json").read_text())
    assert set(block) == set(acc["fit_all"]) and all(b["gpus"] == [2] for b in block.values())


def test_four_ranks_run_every_strategy_with_each_board_counted_once(tmp_path):
    """The x4 path (tensor parallelism over 4 included), as the 2-rank sweep above."""
    out = tmp_path / "sweep4"
    rows = _smoke_rows(4, out)
    assert {x["strategy"] for x in rows} == {"ddp", "fsdp", "tp"}
    done = [x for x in rows if x["status"] == "complete"]
    assert len(done) >= len(rows) - 1, rows  # a gloo rank may abort on 2 cores (see above)
    for x in done:
        assert x["gpus"] == "4"
        # 4 simulated boards of 300 W, each counted once: a board missed or counted twice
        # moves the job's mean power by a quarter. Under load on 2 cores a rank ends later
        # than the others, and the job's time (the slowest rank's) lowers it by some percent.
        assert 3.5 * 300 < float(x["avg_power_w"]) < 4.5 * 300, x
        rec = json.loads((out / "runs" / x["id"] / "run.json").read_text())
        assert rec["extra"]["distributed"]["world_size"] == 4


def test_bad_input_is_one_line(tmp_path):
    r = _run("--gpus", "1", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--gpus must be ≥ 2" in r.stderr
    r = _run("--evaluate", str(tmp_path / "none"), "--out", str(tmp_path / "e"))
    assert r.returncode == 2 and "no results.csv" in r.stderr and "Traceback" not in r.stderr


def test_a_hung_job_is_stopped_with_every_process_it_started(tmp_path):
    """torchrun's ranks are its children: stopping torchrun alone would leave them holding
    their GPUs, so the whole process group goes."""
    import time

    m = _module()
    cur = tmp_path / "current.txt"
    pids = tmp_path / "pids.txt"
    child = "import time; time.sleep(600)"
    job = (
        "import subprocess, sys, time, pathlib; "
        f"c = subprocess.Popen([sys.executable, '-c', {child!r}]); "
        f"pathlib.Path({str(pids)!r}).write_text(str(c.pid)); "
        f"pathlib.Path({str(cur)!r}).write_text('00-hang'); time.sleep(600)"
    )
    t0 = time.monotonic()
    rc = m.supervise_group([sys.executable, "-c", job], cur, timeout_s=1.0, grace_s=2.0)
    assert rc != 0 and time.monotonic() - t0 < 60
    pid = int(pids.read_text())
    for _ in range(50):  # gone, or a zombie waiting for init to reap it
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            break
        if "\nState:\tZ" in state:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the job's child {pid} outlived the stop")


def test_a_job_that_dies_in_a_configuration_records_it_and_the_next_takes_the_rest(tmp_path):
    """bert_sweep.run_jobs (both sweeps' job loop): the first job dies inside configuration
    "b" (current.txt left behind): b is a failed row; the second job ends cleanly: done."""
    m = _module()
    cur = tmp_path / "current.txt"
    script = (
        "import pathlib, sys; a = int(sys.argv[1]); "
        f"pathlib.Path({str(cur)!r}).write_text('b') if a == 0 else None; sys.exit(3 - 3 * a)"
    )
    calls = []

    def make(attempt):
        calls.append(attempt)
        return [sys.executable, "-c", script, str(attempt)]

    rows = {"b": {"id": "b", "layers": 2, "gpus": 2}}
    m.BS.run_jobs(make, tmp_path, rows, 60.0, float("inf"), 1.0, supervise=m.supervise_group,
                  what="torchrun", columns=m.COLUMNS)  # fmt: skip
    assert calls == [0, 1] and not cur.exists()
    with (tmp_path / "results.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["id"] == "b" and row["gpus"] == "2" and row["status"] == "failed"
    assert row["error"] == "torchrun exited with 3 during this configuration"
