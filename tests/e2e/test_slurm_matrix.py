"""The Slurm executor against a real single-node Slurm (Debian's slurm-wlm + munge, started here).

The fixture starts munged, slurmctld and slurmd for this host with a CPU partition, in a temporary
directory on free ports, and points SLURM_CONF at it; the test submits a tiny CPU study through
the executor, cancels one job, and resumes. Skips with the reason where slurm-wlm is absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from jouleprof.bench.executors_slurm import SlurmExecutor, queue_states
from jouleprof.bench.matrix import Cell, run_matrix

NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")

WRITE_RUN = (
    "import sys, time\n"
    "from jouleprof.store.rundir import RunDir\n"
    "from jouleprof.types import Figure, RunRecord, RunStatus\n"
    "time.sleep(float(sys.argv[3]))\n"
    "rec = RunRecord(run_id='t', kind='test', status=RunStatus.COMPLETE)\n"
    "rec.summary['energy_j'] = Figure.measured(float(sys.argv[2]), 'J')\n"
    "RunDir.create(sys.argv[1], rec)\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(d: Path, host: str, cpus: int) -> str:
    return f"""ClusterName=jptest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmdSpoolDir={d}/spool
StateSaveLocation={d}/state
SlurmUser=root
SlurmdUser=root
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.skip(
            f"slurm-wlm/munge not installed (no {', '.join(missing)}): "
            "apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("a single-node Slurm for the test needs root (slurmd runs jobs as their user)")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    (d / "munge.key").write_bytes(os.urandom(1024))
    (d / "munge.key").chmod(0o600)
    host = socket.gethostname().split(".")[0]
    (d / "slurm.conf").write_text(_conf(d, host, max(1, min(os.cpu_count() or 1, 4))))
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    munged = [
        "munged", "-f", f"--socket={d}/munge.sock", f"--key-file={d}/munge.key",
        f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed",
    ]  # fmt: skip
    started = []
    try:
        for cmd in (munged, ["slurmctld", "-c", "-i"], ["slurmd", "-c"]):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                pytest.fail(f"{cmd[0]} did not start: {r.stderr.strip()[-400:]}")
            started.append(cmd[0])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True
            ).stdout.strip()
            if state.startswith("idle"):
                break
            time.sleep(0.3)
        else:
            log = (d / "slurmd.log").read_text()[-600:] if (d / "slurmd.log").exists() else ""
            pytest.fail(f"the test Slurm's node never became idle (state {state!r}): {log}")
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = env["SLURM_CONF"]
        yield d
    finally:
        if "old" in locals():
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old
        if "slurmd" in started:
            # Cancel what is still queued or running first: a job's step (slurmstepd and its
            # srun) outlives the daemons otherwise, and stayed behind after the suite.
            _cancel_all(env)
        for name in ("slurmd", "slurmctld"):
            pid_file = d / f"{name}.pid"
            if pid_file.is_file():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_file.read_text().strip()), 15)
        if "munged" in started:
            subprocess.run([*munged[:3], "--stop"], capture_output=True, timeout=30)


def _cancel_all(env: dict, wait_s: float = 15.0) -> None:
    """scancel every job of the test's Slurm and wait (up to `wait_s`) for the queue to empty."""
    run = dict(env=env, capture_output=True, text=True, timeout=30)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["scancel", "--full", "--quiet", "--partition", "cpu"], **run)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not subprocess.run(["squeue", "-h", "-o", "%i"], **run).stdout.strip():
                return
            time.sleep(0.3)


def cell(cid: str, value: float, sleep_s: float = 0.0) -> Cell:
    argv = (sys.executable, "-c", WRITE_RUN, "{cell_dir}", str(value), str(sleep_s))
    return Cell(cid, argv, {"value": value}, timeout_s=120, gpus=0)


def failing(cid: str) -> Cell:
    prog = "print('ValueError: bad preset'); raise SystemExit(4)"
    return Cell(cid, (sys.executable, "-c", prog), {"value": -1}, timeout_s=120, gpus=0)


def _cancel_when_running(out: Path, cid: str, stop: threading.Event) -> None:
    """scancel the cell's job once it is running (its run has begun: the job really is cut)."""
    cj = out / "cells" / cid / "cell.json"
    while not stop.is_set():
        try:
            job = json.loads(cj.read_text())["attempts"][-1].get("slurm_job_id")
        except (OSError, ValueError, KeyError, IndexError):
            job = None
        if job and queue_states([job]).get(job) == "RUNNING":
            subprocess.run(["scancel", job], check=True, timeout=30)
            return
        time.sleep(0.2)


def test_a_study_as_one_job_array_cancelled_job_resumed_failed_retried(slurm, tmp_path):
    out = tmp_path / "study"
    spec = {"study": "slurm-test"}
    ex = SlurmExecutor(partition="cpu", max_parallel=3, poll_s=0.5, time_min=5)
    # The slow cell would sleep far past its 120 s timeout: only its cancellation ends it sooner.
    cells = [cell("a", 1.0), cell("b", 2.0), cell("slow", 3.0, sleep_s=600), failing("bad")]
    stop = threading.Event()
    canceller = threading.Thread(target=_cancel_when_running, args=(out, "slow", stop))
    canceller.start()
    t0 = time.monotonic()
    try:
        res = run_matrix(out, spec, cells, executor=ex, progress=False)
    finally:
        stop.set()
        canceller.join()
    # The slow cell did not hold the study up (the other three are short jobs, whatever the load).
    assert time.monotonic() - t0 < 110
    # One array: every cell's job id shares the array's id.
    jobs = {
        c.cell_id: json.loads((out / "cells" / c.cell_id / "cell.json").read_text())["attempts"][-1]
        for c in cells
    }
    assert len({j["slurm_job_id"].split("_")[0] for j in jobs.values()}) == 1
    assert res.done == ["a", "b"] and sorted(res.failed) == ["bad", "slow"]
    df = pd.read_csv(res.index_path).set_index("cell_id")
    assert df.loc["a", "energy_j"] == 1.0 and df.loc["b", "energy_j"] == 2.0
    assert df.loc["slow", "status"] == "incomplete" and "CANCELLED" in df.loc["slow", "error"]
    assert (
        df.loc["bad", "status"] == "failed"
        and "exit code 4" in (out / "cells" / "bad" / "error.txt").read_text()
    )

    # Resume: only the cancelled cell is submitted again; the failed one waits for --retry-failed.
    cells[2] = cell("slow", 3.0, sleep_s=0)
    again = run_matrix(out, spec, cells, executor=ex, progress=False)
    assert again.ran == ["slow"] and again.done == ["a", "b", "slow"] and again.failed == ["bad"]
    cells[3] = cell("bad", 4.0)
    retry = run_matrix(out, spec, cells, executor=ex, retry_failed=True, progress=False)
    assert retry.ran == ["bad"] and retry.done == ["a", "b", "slow", "bad"]
    df = pd.read_csv(retry.index_path).set_index("cell_id")
    assert (df["status"] == "complete").all() and df.loc["bad", "energy_j"] == 4.0


def test_a_bad_partition_is_a_clear_error(slurm, tmp_path):
    ex = SlurmExecutor(partition="nosuchpartition", poll_s=0.5)
    with pytest.raises(ValueError, match="Slurm refused"):
        run_matrix(tmp_path / "s", {}, [cell("a", 1.0)], executor=ex, progress=False)
    # The cell is left to a rerun (incomplete), with the reason in runs.csv.
    df = pd.read_csv(tmp_path / "s" / "runs.csv")
    assert df.loc[0, "status"] == "incomplete" and "not submitted" in df.loc[0, "error"]


class _StopAfterSubmit(SlurmExecutor):
    """Submits, then stops watching at once (like a Ctrl-C or a closed terminal)."""

    def _gather(self, plan, watch):
        raise KeyboardInterrupt


def test_a_rerun_waits_for_jobs_already_submitted_instead_of_resubmitting(slurm, tmp_path):
    out = tmp_path / "study"
    cells = [cell("x", 5.0, sleep_s=2)]
    with pytest.raises(KeyboardInterrupt):
        run_matrix(out, {}, cells, executor=_StopAfterSubmit(poll_s=0.5), progress=False)
    first = json.loads((out / "cells" / "x" / "cell.json").read_text())["attempts"]
    assert len(first) == 1 and first[0]["slurm_job_id"]
    res = run_matrix(out, {}, cells, executor=SlurmExecutor(poll_s=0.5), progress=False)
    assert res.done == ["x"]
    attempts = json.loads((out / "cells" / "x" / "cell.json").read_text())["attempts"]
    assert len(attempts) == 1 and attempts[0]["slurm_job_id"] == first[0]["slurm_job_id"]
    assert attempts[0]["status"] == "complete" and not (out / "attempts").exists()
