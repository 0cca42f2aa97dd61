"""bench/matrix.py with tiny `python -c` cells: statuses, resume, retries, runs.csv, executors."""

from __future__ import annotations

import json
import sys
import time

import pandas as pd
import pytest

from jouleprof.bench.cooldown import Cooldown, CooldownConfig
from jouleprof.bench.executors import LocalExecutor, torchrun_argv
from jouleprof.bench.matrix import Cell, run_matrix

# A cell program: writes a complete run.json with one figure (argv: DIR VALUE [SLEEP_S]).
WRITE_RUN = (
    "import sys, time\n"
    "from jouleprof.store.rundir import RunDir\n"
    "from jouleprof.types import Figure, RunRecord, RunStatus\n"
    "if len(sys.argv) > 3: time.sleep(float(sys.argv[3]))\n"
    "rec = RunRecord(run_id='t', kind='test', status=RunStatus.COMPLETE)\n"
    "rec.summary['energy_j'] = Figure.measured(float(sys.argv[2]), 'J')\n"
    "RunDir.create(sys.argv[1], rec)\n"
)


def ok(cid, value, **kw):
    return Cell(cid, (sys.executable, "-c", WRITE_RUN, "{cell_dir}", str(value)), kw, timeout_s=60)


def fails(cid, code=3):
    prog = f"print('loading the model'); print('ValueError: no such preset'); exit({code})"
    return Cell(cid, (sys.executable, "-c", prog), {"kind": "bad"}, timeout_s=60)


def test_cells_run_and_each_ending_is_recorded(tmp_path):
    silent = Cell("silent", (sys.executable, "-c", "pass"), {"kind": "none"})
    cells = [ok("a", 1.5, lr=0.1), fails("b"), silent]
    res = run_matrix(tmp_path, {"name": "t"}, cells, progress=False)
    assert res.done == ["a"] and res.failed == ["b", "silent"] and res.ran == ["a", "b", "silent"]
    df = pd.read_csv(res.index_path).set_index("cell_id")
    assert df.loc["a", "status"] == "complete" and df.loc["a", "energy_j"] == 1.5
    assert df.loc["a", "lr"] == 0.1 and df.loc["b", "kind"] == "bad"
    err = (tmp_path / "cells" / "b" / "error.txt").read_text()
    assert "exit code 3" in err and "ValueError: no such preset" in err  # cell.log's tail
    assert df.loc["b", "error"].startswith("exited with code 3")
    # A failed cell that wrote no run.json gets one saying failed.
    assert json.loads((tmp_path / "cells" / "b" / "run.json").read_text())["status"] == "failed"
    assert "without writing run.json" in df.loc["silent", "error"]
    cj = json.loads((tmp_path / "cells" / "a" / "cell.json").read_text())
    assert cj["factors"] == {"lr": 0.1} and str(tmp_path / "cells" / "a") in cj["command"]
    assert cj["attempts"][-1]["exit_code"] == 0 and cj["attempts"][-1]["status"] == "complete"


def test_rerun_resumes_and_retries_failed_on_request(tmp_path):
    cells = [ok("a", 1.0), fails("b")]
    run_matrix(tmp_path, {"v": 1}, cells, progress=False)
    again = run_matrix(tmp_path, {"v": 1}, cells, progress=False)
    assert again.ran == [] and again.done == ["a"] and again.failed == ["b"]
    fixed = [ok("a", 1.0), ok("b", 2.0)]  # same ids, the failing program fixed
    retry = run_matrix(tmp_path, {"v": 1}, fixed, retry_failed=True, progress=False)
    assert retry.ran == ["b"] and retry.done == ["a", "b"]
    assert (tmp_path / "attempts" / "b.1" / "error.txt").is_file()  # the failed attempt kept
    cj = json.loads((tmp_path / "cells" / "b" / "cell.json").read_text())
    assert [a["status"] for a in cj["attempts"]] == ["failed", "complete"]
    assert len(json.loads((tmp_path / "study.json").read_text())["resumed"]) == 2
    with pytest.raises(ValueError, match="differs in v"):
        run_matrix(tmp_path, {"v": 2}, cells, progress=False)


def test_an_extendable_list_may_grow_on_resume_and_nothing_else(tmp_path):
    run_matrix(tmp_path, {"seeds": [17, 18], "v": 1}, [ok("s17", 1.0)], progress=False)
    grown = {"seeds": [17, 18, 19], "v": 1}
    with pytest.raises(ValueError, match="differs in seeds"):  # not extendable: refused
        run_matrix(tmp_path, grown, [ok("s17", 1.0)], progress=False)
    res = run_matrix(
        tmp_path, grown, [ok("s17", 1.0), ok("s19", 2.0)], progress=False, extendable=("seeds",)
    )
    assert res.ran == ["s19"] and res.done == ["s17", "s19"]
    sj = json.loads((tmp_path / "study.json").read_text())
    assert sj["seeds"] == [17, 18, 19] and len(sj["resumed"]) == 1
    assert [(e["field"], e["from"], e["to"]) for e in sj["extended"]] == [
        ("seeds", [17, 18], [17, 18, 19])
    ]
    # The longer list is now the study's: the same call resumes, a shorter or reordered list
    # and any other change are refused, naming the field.
    run_matrix(tmp_path, grown, [ok("s17", 1.0)], progress=False, extendable=("seeds",))
    for bad, field_ in (
        ({"seeds": [17, 18], "v": 1}, "seeds"),
        ({"seeds": [19, 18, 17], "v": 1}, "seeds"),
        ({"seeds": [17, 18, 19, 20], "v": 2}, "v"),
    ):
        with pytest.raises(ValueError, match=f"differs in {field_}"):
            run_matrix(tmp_path, bad, [ok("s17", 1.0)], progress=False, extendable=("seeds",))
    assert len(json.loads((tmp_path / "study.json").read_text())["extended"]) == 1


def test_killed_cells_are_incomplete_and_rerun_timeouts_fail(tmp_path):
    killed = Cell("k", (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"), {})
    slow = Cell("slow", (sys.executable, "-c", "import time; time.sleep(30)"), {}, timeout_s=0.5)
    res = run_matrix(tmp_path, {}, [killed, slow], progress=False)
    df = pd.read_csv(res.index_path).set_index("cell_id")
    assert df.loc["k", "status"] == "incomplete" and "signal 9" in df.loc["k", "error"]
    assert df.loc["slow", "status"] == "failed" and "TimeoutExpired" in df.loc["slow", "error"]
    again = run_matrix(tmp_path, {}, [ok("k", 3.0), slow], progress=False)
    assert again.ran == ["k"] and again.done == ["k"]


def test_runs_csv_is_rebuilt_after_each_cell(tmp_path):
    copy = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"
    peek = Cell(
        "peek", (sys.executable, "-c", copy, str(tmp_path / "runs.csv"), "{cell_dir}/seen.csv"), {}
    )
    run_matrix(tmp_path, {}, [ok("first", 1.0), peek], progress=False)
    seen = pd.read_csv(tmp_path / "cells" / "peek" / "seen.csv").set_index("cell_id")
    assert seen.loc["first", "status"] == "complete" and seen.loc["peek", "status"] == "missing"


def test_skip_rule_and_bad_cells():
    with pytest.raises(ValueError, match=r"A-Za-z0-9"):
        Cell("a/b", ("true",), {})
    with pytest.raises(ValueError, match="gpus"):
        Cell("a", ("true",), {}, gpus=-1)
    with pytest.raises(ValueError, match="argv"):
        Cell("a", (), {})


def test_skip_rule_skips_and_says_why(tmp_path):
    cells = [ok("s1", 1.0, size=1), ok("s2", 2.0, size=2)]

    def skip(cell, statuses):
        return ("skipped", "too big") if cell.factors["size"] > 1 else None

    res = run_matrix(tmp_path, {}, cells, skip=skip, progress=False)
    assert res.done == ["s1"] and res.skipped == ["s2"]
    df = pd.read_csv(res.index_path).set_index("cell_id")
    assert df.loc["s2", "status"] == "skipped" and df.loc["s2", "error"] == "too big"


def test_a_cell_per_gpu_at_once_each_with_its_own_gpus(tmp_path):
    show = (
        "import os, sys; open(sys.argv[1] + '/env', 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    cells = [
        Cell(
            f"c{i}",
            (sys.executable, "-c", f"import time; time.sleep(0.6); {show}", "{cell_dir}"),
            {},
        )
        for i in range(2)
    ]
    pair = Cell(
        "pair",
        ("/bin/sh", "-c", 'echo -n "$CUDA_VISIBLE_DEVICES" > "$0/env"', "{cell_dir}"),
        {},
        gpus=2,
    )
    cpu = Cell(
        "cpu",
        ("/bin/sh", "-c", 'echo -n "[$CUDA_VISIBLE_DEVICES]" > "$0/env"', "{cell_dir}"),
        {},
        gpus=0,
    )
    big = Cell("big", ("true",), {}, gpus=3)
    t0 = time.monotonic()
    res = run_matrix(
        tmp_path, {}, [*cells, pair, cpu, big], executor=LocalExecutor(gpus=[0, 1]), progress=False
    )
    wall = time.monotonic() - t0
    env = {c: (tmp_path / "cells" / c / "env").read_text() for c in ("c0", "c1", "pair", "cpu")}
    assert sorted([env["c0"], env["c1"]]) == ["0", "1"] and env["pair"] == "0,1"
    assert env["cpu"] == "[]"  # a CPU cell sees no GPU
    assert wall < 2.4, wall  # c0 and c1 ran side by side
    assert res.ran == ["c0", "c1", "pair", "cpu", "big"]  # (none writes a run.json: all failed)
    assert "needs 3 GPUs" in pd.read_csv(res.index_path).set_index("cell_id").loc["big", "error"]


def test_torchrun_for_python_cells_on_several_gpus():
    argv = torchrun_argv(["/usr/bin/python3", "-m", "pkg.cell", "--out", "D"], 4)
    assert argv[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    assert argv[5:] == ["-m", "pkg.cell", "--out", "D"]
    assert torchrun_argv(["/bin/sh", "-c", "x"], 4) == ["/bin/sh", "-c", "x"]
    assert torchrun_argv(["python", "-m", "m"], 1) == ["python", "-m", "m"]


class FakeGpu:
    """Power that falls by `drop_w` per read towards `floor_w`, on a fake clock."""

    def __init__(self, start_w, floor_w, drop_w):
        self.p, self.floor, self.drop, self.t = start_w, floor_w, drop_w, 0.0

    def read(self, gpus):
        self.p = max(self.floor, self.p - self.drop)
        return [self.p for _ in gpus]

    def sleep(self, s):
        self.t += s


def test_cooldown_waits_for_idle_or_the_time_limit():
    gpu = FakeGpu(start_w=300, floor_w=80, drop_w=20)
    cool = Cooldown(CooldownConfig(idle_w=75, max_s=60), gpu.read, gpu.sleep, lambda: gpu.t)
    rec = cool.wait([0])
    assert rec["reason"] == "near idle" and rec["end_w"] == [80] and rec["target_w"] == [90.0]
    assert 5 < rec["waited_s"] < 60
    hot = FakeGpu(start_w=300, floor_w=250, drop_w=1)
    rec = Cooldown(CooldownConfig(idle_w=75, max_s=5), hot.read, hot.sleep, lambda: hot.t).wait([0])
    assert rec["reason"] == "time limit" and rec["waited_s"] == pytest.approx(5, abs=0.6)
    nothing = Cooldown(CooldownConfig(), lambda g: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(RuntimeError):
        nothing.wait([0])
    with pytest.raises(ValueError, match="max_s"):
        CooldownConfig(max_s=-1)


def test_cooldown_is_recorded_in_the_cell(tmp_path):
    gpu = FakeGpu(start_w=200, floor_w=60, drop_w=50)
    ex = LocalExecutor(gpus=[0], cooldown=CooldownConfig(idle_w=60, max_s=30, poll_s=0.01))
    ex._cool = Cooldown(ex.cooldown, gpu.read, gpu.sleep, lambda: gpu.t)
    run_matrix(tmp_path, {}, [ok("g", 1.0)], executor=ex, progress=False)
    att = json.loads((tmp_path / "cells" / "g" / "cell.json").read_text())["attempts"][-1]
    assert att["cooldown"]["reason"] == "near idle" and att["cooldown"]["gpus"] == [0]


def _dead_writer() -> dict:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", "import json; from jouleprof.store.liveness import writer_info; "
         "print(json.dumps(writer_info()))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out)


def test_collect_indexes_every_run_and_lists_the_broken(tmp_path):
    from jouleprof.bench.index import collect
    from jouleprof.store.liveness import writer_info
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import RunRecord

    run_matrix(tmp_path, {}, [ok("a", 1.0, lr=0.1), fails("b")], progress=False)
    crashed = RunRecord(run_id="c", kind="test", extra={"writer": _dead_writer()})
    RunDir.create(tmp_path / "loose" / "crashed", crashed)
    live = RunRecord(run_id="l", kind="test", extra={"writer": writer_info()})
    RunDir.create(tmp_path / "loose" / "live", live)
    (tmp_path / "loose" / "corrupt").mkdir()
    (tmp_path / "loose" / "corrupt" / "run.json").write_text('{"status": "comp')
    (tmp_path / "runs.csv").unlink()
    index, rows = collect(tmp_path)
    df = pd.read_csv(index).set_index("cell_id")
    assert df.loc["a", "status"] == "complete" and df.loc["a", "energy_j"] == 1.0
    assert df.loc["a", "lr"] == 0.1  # factors from cell.json
    assert df.loc["b", "status"] == "failed"
    assert (
        df.loc["loose/crashed", "status"] == "crashed"
        and "gone" in df.loc["loose/crashed", "error"]
    )
    assert df.loc["loose/live", "status"] == "running"
    assert (
        df.loc["loose/corrupt", "status"] == "corrupt"
        and "unreadable" in df.loc["loose/corrupt", "error"]
    )
    pq = pd.read_parquet(tmp_path / "runs.parquet").set_index("cell_id")
    assert pq.loc["a", "energy_j"] == 1.0 and len(pq) == len(df) == 5


def test_a_cell_on_several_gpus_runs_under_torchrun(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "rank.py"
    script.write_text(
        "import os, sys\n"
        "d = sys.argv[1]\n"
        "r, w = os.environ['RANK'], os.environ['WORLD_SIZE']\n"
        "open(f'{d}/rank{r}', 'w').write(w + ' ' + os.environ['CUDA_VISIBLE_DEVICES'])\n"
    )
    cell = Cell("ddp", (sys.executable, str(script), "{cell_dir}"), {}, timeout_s=120, gpus=2)
    run_matrix(tmp_path / "s", {}, [cell], executor=LocalExecutor(gpus=[0, 1]), progress=False)
    cdir = tmp_path / "s" / "cells" / "ddp"
    seen = sorted(p.name for p in cdir.glob("rank*"))
    assert seen == ["rank0", "rank1"], (cdir / "cell.log").read_text()[-2000:]
    assert (cdir / "rank1").read_text() == "2 0,1"  # both ranks, both GPUs, one cell


def test_a_cells_own_exception_lands_in_error_txt_and_runs_csv(tmp_path):
    from jouleprof.bench.matrix import write_cell_error

    def slot(cell, cdir):  # a cell that fails inside the study's process, as in-process slots do
        try:
            try:
                {}["preset"]
            except KeyError as e:
                raise ValueError("no such preset") from e
        except ValueError as e:
            assert write_cell_error(cdir, e) == "ValueError: no such preset"
        return 1

    res = run_matrix(tmp_path, {}, [ok("x", 1.0)], executor=LocalExecutor(slots=[slot]),
                     progress=False)  # fmt: skip
    text = (tmp_path / "cells" / "x" / "error.txt").read_text()
    assert text.startswith("ValueError: no such preset\n\nTraceback")
    assert "KeyError" in text  # the cause's traceback too
    assert res.failed == ["x"]
    row = pd.read_csv(tmp_path / "runs.csv").set_index("cell_id").loc["x"]
    assert row["status"] == "failed" and row["error"] == "ValueError: no such preset"
