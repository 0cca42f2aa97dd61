"""Where a study's cells run: a local process each, or a Slurm job each through submitit.

Every executor runs the same command, `python -m jouleprof.bench.cellmain CONFIG OUT`, so a cell
behaves the same wherever it runs and its results meet in the study directory.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def cell_command(config_path: Path, cell_dir: Path) -> list[str]:
    return [sys.executable, "-m", "jouleprof.bench.cellmain", str(config_path), str(cell_dir)]


def local_runner(
    config_path: Path, cell_dir: Path, timeout_s: float, env: dict[str, str] | None = None
) -> int:
    """One local process per cell; its output goes to cell_dir/cell.log. Returns its exit code."""
    log_path = cell_dir / "cell.log"
    with log_path.open("w") as f:
        p = subprocess.Popen(
            cell_command(config_path, cell_dir),
            stdout=f,
            stderr=subprocess.STDOUT,
            env=os.environ if env is None else env,
        )
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            (cell_dir / "error.txt").write_text(
                f"TimeoutExpired: the cell ran past its {timeout_s:.0f} s limit and was killed\n"
            )
            return 124
        except KeyboardInterrupt:
            p.terminate()
            p.wait()
            raise


def gpu_runner(gpu: int) -> Callable[[Path, Path, float], int]:
    """A local runner whose cells see only GPU `gpu` (CUDA_VISIBLE_DEVICES), as their GPU 0:
    one slot of a study that runs a cell per GPU at once (`run_study(..., slots=...)`)."""

    def run(config_path: Path, cell_dir: Path, timeout_s: float) -> int:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
        return local_runner(config_path, cell_dir, timeout_s, env=env)

    run.gpu = gpu  # type: ignore[attr-defined]  (named in cell_wall.csv)
    return run


def slurm_runner(
    partition: str | None = None, gpus_per_node: int = 1, timeout_min: int = 60, **params: object
) -> Callable[[Path, Path, float], int]:
    """A runner that submits each cell as a Slurm job (submitit) and waits for it.

    Args:
        partition: Slurm partition; other submitit `slurm_*` parameters go in `params`.
        gpus_per_node: GPUs each job asks for.
        timeout_min: the job's time limit.
    """
    try:
        import submitit
    except ImportError as e:
        raise ImportError("the Slurm executor needs submitit: pip install submitit") from e

    def run(config_path: Path, cell_dir: Path, timeout_s: float) -> int:
        ex = submitit.AutoExecutor(folder=str(cell_dir / "slurm"))
        ex.update_parameters(
            timeout_min=timeout_min,
            gpus_per_node=gpus_per_node,
            slurm_partition=partition,
            **params,
        )
        job = ex.submit(subprocess.call, cell_command(config_path, cell_dir), timeout=timeout_s)
        log.info("cell %s submitted as Slurm job %s", cell_dir.name, job.job_id)
        try:
            return int(job.result())
        except Exception as e:  # the job failed or was cancelled: the cell records it
            (cell_dir / "error.txt").write_text(f"Slurm job {job.job_id} failed: {e}\n")
            return 1

    return run
