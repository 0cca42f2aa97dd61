"""The study runner's bookkeeping, with a fake cell runner (no training): resume, OOM, failures."""

import json

import pandas as pd
import pytest

from jouleprof.bench.study import StudySpec, cells, run_study
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus


def fake_runner(oom_from=8, fail_cells=(), crash_cells=()):
    calls = []

    def run(config_path, cell_dir, timeout_s):
        cfg = json.loads(config_path.read_text())
        cid = cell_dir.name
        calls.append(cid)
        if cid in crash_cells:  # died mid-run: run.json says running, no error file
            RunDir.create(cell_dir, RunRecord(run_id=cid, kind="cell"))
            return -9
        if cid in fail_cells:
            (cell_dir / "error.txt").write_text("RuntimeError: boom\n")
            return 1
        rec = RunRecord(run_id=cid, kind="cell", status=RunStatus.COMPLETE)
        if cfg["batch_size"] >= oom_from:
            rec.extra["oom"] = True
            rec.notes.append(f"out of memory at batch size {cfg['batch_size']}")
        else:
            rec.summary["throughput_samples_per_s"] = Figure.measured(
                10.0 * cfg["batch_size"], "samples/s"
            )
        RunDir.create(cell_dir, rec)
        return 3 if rec.extra.get("oom") else 0

    run.calls = calls
    return run


def spec(**kw):
    base = dict(
        preset="tiny", batch_sizes=(2, 8, 16), modes=("baseline", "fine"), reps=2, duration_s=1
    )
    return StudySpec(**{**base, **kw})


def test_matrix_order_and_oom_skips_larger_batches(tmp_path):
    runner = fake_runner(oom_from=8)
    index = run_study(spec(), tmp_path, runner)
    df = pd.read_csv(index)
    assert len(df) == len(cells(spec())) == 12
    assert list(df["cell_id"][:3]) == ["bs2-baseline-r0", "bs2-fine-r0", "bs8-baseline-r0"]
    assert set(df.loc[df.batch_size == 2, "status"]) == {"complete"}
    assert set(df.loc[df.batch_size >= 8, "status"]) == {"oom"}
    # Only the first bs8 cell ran: its out-of-memory settles bs8 and bs16 for every mode and rep.
    assert [c for c in runner.calls if not c.startswith("bs2")] == ["bs8-baseline-r0"]
    assert df.loc[df.cell_id == "bs8-fine-r0", "error"].item().startswith("skipped")
    assert df.loc[df.cell_id == "bs16-fine-r1", "error"].item().startswith("skipped")
    assert df.loc[df.cell_id == "bs2-fine-r0", "throughput_samples_per_s"].item() == 20.0


def test_resume_skips_finished_and_redoes_the_incomplete(tmp_path):
    run_study(
        spec(), tmp_path, fake_runner(crash_cells={"bs2-fine-r1"}, fail_cells={"bs2-baseline-r1"})
    )
    df = pd.read_csv(tmp_path / "runs.csv").set_index("cell_id")
    assert df.loc["bs2-fine-r1", "status"] == "incomplete"
    assert df.loc["bs2-baseline-r1", "status"] == "failed"
    assert df.loc["bs2-baseline-r1", "error"] == "RuntimeError: boom"
    again = fake_runner()
    run_study(spec(), tmp_path, again)
    assert again.calls == ["bs2-fine-r1"]  # only the incomplete cell is redone
    df = pd.read_csv(tmp_path / "runs.csv").set_index("cell_id")
    assert df.loc["bs2-fine-r1", "status"] == "complete"
    assert json.loads((tmp_path / "study.json").read_text())["resumed"]


def test_a_different_study_in_the_same_directory_is_refused(tmp_path):
    run_study(spec(), tmp_path, fake_runner())
    with pytest.raises(ValueError, match="different study"):
        run_study(spec(reps=3), tmp_path, fake_runner())


def test_bad_spec_lists_what_is_allowed():
    with pytest.raises(ValueError, match="baseline, e2e, fine"):
        StudySpec(modes=("fast",))
    with pytest.raises(ValueError, match="batch_sizes"):
        StudySpec(batch_sizes=(0,))


def test_time_budget_stops_starting_cells_and_a_rerun_finishes(tmp_path):
    import time

    slow = fake_runner()

    def runner(*a):
        time.sleep(0.05)
        return slow(*a)

    run_study(spec(reps=1), tmp_path, runner, time_budget_s=0.01)
    assert slow.calls == ["bs2-baseline-r0"]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert (df["status"] == "missing").sum() == 5
    run_study(spec(reps=1), tmp_path, fake_runner())
    assert (pd.read_csv(tmp_path / "runs.csv")["status"] != "missing").all()


def test_slots_run_cells_at_once_and_keep_the_oom_rule(tmp_path):
    import threading
    import time

    inner = fake_runner(oom_from=16)
    lock = threading.Lock()
    running, peak, seen = [0], [0], {0: [], 1: []}

    def slot(i):
        def run(config_path, cell_dir, timeout_s):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                seen[i].append(cell_dir.name)
            time.sleep(0.05)
            try:
                return inner(config_path, cell_dir, timeout_s)
            finally:
                with lock:
                    running[0] -= 1

        run.gpu = i
        return run

    index = run_study(spec(), tmp_path, slots=[slot(0), slot(1)])
    df = pd.read_csv(index)
    assert set(df.loc[df.batch_size < 16, "status"]) == {"complete"}
    assert set(df.loc[df.batch_size == 16, "status"]) == {"oom"}
    assert peak[0] == 2 and seen[0] and seen[1]  # both slots worked, at the same time
    # bs16 ran at most once per slot before its out-of-memory was known, never in rep 1.
    assert not [c for c in inner.calls if c.startswith("bs16") and c.endswith("r1")]
    wall = pd.read_csv(tmp_path / "cell_wall.csv")
    assert set(wall["gpu"]) == {0, 1}
    assert sorted(wall["cell_id"]) == sorted(inner.calls)


def test_a_failing_slot_stops_the_study_with_its_error(tmp_path):
    def broken(config_path, cell_dir, timeout_s):
        raise RuntimeError("slot died")

    with pytest.raises(RuntimeError, match="slot died"):
        run_study(spec(), tmp_path, slots=[broken, fake_runner()])


def test_max_warmup_steps_reaches_every_cell_and_leaves_old_studies_resumable(tmp_path):
    from jouleprof.bench.study import cell_config

    cell = {"cell_id": "bs2-fine-r0", "batch_size": 2, "mode": "fine", "rep": 0}
    assert cell_config(spec(max_warmup_steps=2), cell)["warmup"] == {"max_steps": 2}
    assert "warmup" not in cell_config(spec(), cell)  # the cell's own default rule
    # study.json of a study without the cap is what it was before the field existed
    assert "max_warmup_steps" not in spec().to_json()
    assert spec(max_warmup_steps=3).to_json()["max_warmup_steps"] == 3
    with pytest.raises(ValueError, match="max_warmup_steps must be ≥ 2"):
        spec(max_warmup_steps=1)
    run_study(spec(max_warmup_steps=4), tmp_path, fake_runner())
    written = json.loads((tmp_path / "cells" / "bs2-baseline-r0.config.json").read_text())
    assert written["warmup"] == {"max_steps": 4}
