"""The Slurm executor: a study's whole matrix submitted at once as submitit job arrays.

Every cell left to run becomes one task of a job array (one array per GPU count), each task with
its own GPUs (Slurm hands a job's GPUs to it alone), at most `max_parallel` running at once. The
executor then watches the queue (squeue, which needs no accounting database) and settles each
cell as its job ends, so runs.csv fills in as results land. A cancelled or preempted job leaves
its cell incomplete (the next run resubmits it); a job that ran out of time or memory, or whose
cell failed, is recorded failed with its error. If the submitting process stops, the jobs keep
running: the next run finds the cells they finished done, and waits for those still queued or
running rather than submit them twice.
"""

from __future__ import annotations

import logging
import math
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jouleprof.bench.executors import run_process, torchrun_argv
from jouleprof.extras import advice

if TYPE_CHECKING:
    from jouleprof.bench.matrix import Cell, Plan

log = logging.getLogger(__name__)

SLURM_DIR = "slurm"
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
# Ends that are the cell's own fault (or its limits'): failed. Other ends (CANCELLED,
# PREEMPTED, NODE_FAIL, BOOT_FAIL, DEADLINE, gone from the queue) leave the cell incomplete.
FAILED_ENDS = ("TIMEOUT", "OUT_OF_MEMORY", "FAILED")


@dataclass(frozen=True)
class SlurmConfig:
    """How the matrix is submitted (CLI: --slurm-partition, --slurm-account, --slurm-time, ...)."""

    partition: str | None = None
    """Slurm partition (None: the cluster's default)."""
    account: str | None = None
    """Slurm account to charge (None: the user's default)."""
    time_min: int | None = None
    """Each job's time limit in minutes; None: the array's longest cell timeout plus 5 minutes."""
    max_parallel: int = 8
    """At most this many of the matrix's jobs run at once (the array's % limit)."""
    cpus_per_task: int | None = None
    """CPUs per job (None: the cluster's default)."""
    mem_gb: float | None = None
    """Memory per job in GB (None: the cluster's default)."""
    poll_s: float = 5.0
    """Seconds between looks at the queue."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further submitit SlurmExecutor parameters, e.g. {"constraint": "h200", "qos": "high"}."""

    def __post_init__(self) -> None:
        if self.time_min is not None and self.time_min < 1:
            raise ValueError(f"time_min must be ≥ 1 minute, got {self.time_min}")
        if self.max_parallel < 1:
            raise ValueError(f"max_parallel must be ≥ 1, got {self.max_parallel}")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise ValueError(f"cpus_per_task must be ≥ 1, got {self.cpus_per_task}")
        if self.mem_gb is not None and not self.mem_gb > 0:
            raise ValueError(f"mem_gb must be > 0, got {self.mem_gb}")
        if not self.poll_s > 0:
            raise ValueError(f"poll_s must be > 0, got {self.poll_s}")


def run_cell_job(argv: Sequence[str], cell_dir: str, timeout_s: float, gpus: int) -> int:
    """What each Slurm task runs: the cell's command (through torchrun on several GPUs)."""
    cmd = torchrun_argv(argv, gpus) if gpus > 1 else list(argv)
    return run_process(cmd, Path(cell_dir), timeout_s)


def queue_states(job_ids: Sequence[str]) -> dict[str, str]:
    """job id -> state for the jobs squeue still lists (finished ones stay there a while)."""
    if not job_ids:
        return {}
    roots = sorted({j.split("_")[0] for j in job_ids})
    cmd = ["squeue", "-h", "-r", "--states=all", "-o", "%i|%T", "-j", ",".join(roots)]
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("squeue failed (%s): the queue is looked at again later", e)
        return {j: "UNKNOWN" for j in job_ids}
    out = {}
    for line in text.splitlines():
        jid, _, state = line.strip().partition("|")
        if jid:
            out[jid] = state.split()[0] if state else "UNKNOWN"
    return out


class SlurmExecutor:
    """Submits the matrix as job arrays and gathers the cells as their jobs end."""

    def __init__(self, config: SlurmConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise ValueError("give a SlurmConfig or its fields, not both")
        self.config = config or SlurmConfig(**options)

    def _executor(self, folder: Path, cells: Sequence[Cell], gpus: int):
        try:
            import submitit
        except ImportError as e:
            raise ImportError(f"the Slurm executor needs submitit: {advice('submitit')}") from e
        c = self.config
        longest_s = max(cell.timeout_s for cell in cells)
        params: dict[str, Any] = {
            "time": c.time_min or int(math.ceil(longest_s / 60)) + 5,
            "nodes": 1,
            "ntasks_per_node": 1,
            "array_parallelism": c.max_parallel,
            "job_name": f"jouleprof-{folder.parent.name}"[:60],
        }
        if gpus > 0:
            params["gpus_per_node"] = gpus
        for key, value in (
            ("partition", c.partition),
            ("account", c.account),
            ("cpus_per_task", c.cpus_per_task),
            ("mem", None if c.mem_gb is None else f"{int(math.ceil(c.mem_gb * 1024))}M"),
        ):
            if value is not None:
                params[key] = value
        ex = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=0)
        ex.update_parameters(**params, **c.extra)
        return ex

    def execute(self, plan: Plan) -> None:
        cells = plan.take_all()
        if not cells:
            return
        folder = plan.out / SLURM_DIR
        watch: dict[str, tuple[Cell, Any, float]] = {}
        fresh = []
        states = queue_states([j for c in cells if (j := self._earlier_job(plan, c))])
        for cell in cells:
            jid = self._earlier_job(plan, cell)
            if jid and states.get(jid) in ALIVE:  # submitted by an earlier run, still going
                watch[jid] = (cell, self._job(folder, jid), time.monotonic())
                plan.report(cell, f"waiting for Slurm job {jid} (submitted earlier)")
            else:
                fresh.append(cell)
        by_gpus: dict[int, list[Cell]] = {}
        for cell in fresh:
            by_gpus.setdefault(cell.gpus, []).append(cell)
        for gpus, group in by_gpus.items():
            watch.update(self._submit(plan, folder, group, gpus))
        self._gather(plan, watch)

    @staticmethod
    def _earlier_job(plan: Plan, cell: Cell) -> str | None:
        from jouleprof.bench.matrix import cell_dir, read_cell_json

        attempts = read_cell_json(cell_dir(plan.out, cell.cell_id)).get("attempts") or [{}]
        last = attempts[-1]
        return None if "finished_at" in last else last.get("slurm_job_id")

    @staticmethod
    def _job(folder: Path, job_id: str):
        import submitit

        return submitit.SlurmJob(folder=str(folder), job_id=job_id)

    def _submit(self, plan: Plan, folder: Path, cells: list[Cell], gpus: int) -> dict[str, Any]:
        ex = self._executor(folder, cells, gpus)
        dirs = [plan.prepare(c, executor="slurm") for c in cells]
        try:
            with ex.batch():
                jobs = [
                    ex.submit(run_cell_job, c.command(d), str(d), c.timeout_s, gpus)
                    for c, d in zip(cells, dirs, strict=True)
                ]
        except Exception as e:  # sbatch refused (a bad partition or account): nothing runs
            for c in cells:
                plan.finish(c, None, 0.0, why=f"not submitted: {e}")
            raise ValueError(f"Slurm refused the job array: {str(e).strip()[-500:]}") from None
        out = {}
        for c, job in zip(cells, jobs, strict=True):
            plan.update_attempt(c, slurm_job_id=job.job_id)
            out[job.job_id] = (c, job, time.monotonic())
        log.info("submitted %d cells as Slurm job array %s", len(jobs), jobs[0].job_id)
        return out

    def _gather(self, plan: Plan, watch: dict[str, tuple[Cell, Any, float]]) -> None:
        missing: dict[str, int] = {}
        try:
            while watch:
                states = queue_states(list(watch))
                for jid, (cell, job, t0) in list(watch.items()):
                    state = states.get(jid)
                    has_result = job.paths.result_pickle.exists()
                    if not has_result and state in (*ALIVE, "UNKNOWN"):
                        continue
                    if not has_result and state in (None, "COMPLETED"):
                        missing[jid] = missing.get(jid, 0) + 1  # the result file may lag
                        if missing[jid] < 3:
                            continue
                    self._settle(plan, cell, job, state, time.monotonic() - t0)
                    del watch[jid]
                if watch:
                    time.sleep(self.config.poll_s)
        except KeyboardInterrupt:
            log.warning(
                "stopped watching %d Slurm jobs: they keep running; rerun the same command to "
                "gather them (or scancel them)",
                len(watch),
            )
            raise

    @staticmethod
    def _settle(plan: Plan, cell: Cell, job: Any, state: str | None, wall_s: float) -> None:
        from jouleprof.bench.matrix import ERROR_TXT, cell_dir

        cdir = cell_dir(plan.out, cell.cell_id)
        info = {"slurm_job_id": job.job_id, "slurm_state": state or "gone from the queue"}
        if job.paths.result_pickle.exists():
            try:
                code = int(job.result())
            except Exception as e:  # the task itself raised (rare: run_cell_job catches most)
                (cdir / ERROR_TXT).write_text(f"Slurm job {job.job_id} failed: {e}\n")
                code = 1
            plan.finish(cell, code, wall_s, **info)
            return
        why = f"Slurm job {job.job_id} ended {state or 'without a result'}"
        if state in FAILED_ENDS and not (cdir / ERROR_TXT).is_file():
            (cdir / ERROR_TXT).write_text(why + "\n")
        plan.finish(cell, None, wall_s, why=why, **info)
