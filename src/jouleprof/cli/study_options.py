"""Options every `jouleprof study ...` command shares: where its cells run, and retries.

A study command takes them by decorating itself with `run_options` and accepting a
`run_options: RunOptions` parameter, which it hands to `run_matrix`:

    @study_app.command("bert")
    @run_options
    def bert_cmd(..., out: Path = ..., run_options: RunOptions = None) -> None:
        cells = ...
        run_matrix(out, spec, cells, **run_options.matrix_kwargs())

The flags: --executor local|slurm, --parallel-gpus (local: a cell per GPU at once),
--cooldown-max-s (local: wait for GPUs to cool between cells), --slurm-partition,
--slurm-account, --slurm-time, --slurm-max-parallel, --slurm-cpus, --slurm-mem-gb, and
--retry-failed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from jouleprof.cli.console import fail


@dataclass(frozen=True)
class RunOptions:
    """Where a study's cells run (built from the shared flags)."""

    executor: Any
    """A bench.matrix Executor (LocalExecutor or SlurmExecutor)."""
    retry_failed: bool = False
    """Rerun cells recorded as failed."""
    name: str = "local"
    """The executor's name, for messages."""

    def matrix_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `run_matrix` these options set."""
        return {"executor": self.executor, "retry_failed": self.retry_failed}


_OPTIONS: dict[str, tuple[Any, Any]] = {
    "executor": (
        Annotated[
            str,
            typer.Option(
                help="local (processes on this machine) or slurm (one submitit job array).",
                rich_help_panel="Where cells run",
            ),
        ],
        "local",
    ),
    "parallel_gpus": (
        Annotated[
            str | None,
            typer.Option(
                help="Local: run a cell on each of these GPUs at once, e.g. 0,1 or 'all' "
                "(each cell sees only its own GPUs).",
                rich_help_panel="Where cells run",
            ),
        ],
        None,
    ),
    "cooldown_max_s": (
        Annotated[
            float,
            typer.Option(
                help="Local: before a GPU cell, wait up to this long for its GPUs' power to "
                "return near idle (0: no wait); recorded in each cell.json.",
                rich_help_panel="Where cells run",
            ),
        ],
        60.0,
    ),
    "slurm_partition": (
        Annotated[str | None, typer.Option(help="Slurm partition.", rich_help_panel="Slurm")],
        None,
    ),
    "slurm_account": (
        Annotated[str | None, typer.Option(help="Slurm account.", rich_help_panel="Slurm")],
        None,
    ),
    "slurm_time": (
        Annotated[
            int | None,
            typer.Option(
                help="Each job's time limit in minutes (default: the cell timeout + 5).",
                rich_help_panel="Slurm",
            ),
        ],
        None,
    ),
    "slurm_max_parallel": (
        Annotated[
            int,
            typer.Option(help="At most this many jobs run at once.", rich_help_panel="Slurm"),
        ],
        8,
    ),
    "slurm_cpus": (
        Annotated[int | None, typer.Option(help="CPUs per job.", rich_help_panel="Slurm")],
        None,
    ),
    "slurm_mem_gb": (
        Annotated[float | None, typer.Option(help="Memory per job, GB.", rich_help_panel="Slurm")],
        None,
    ),
    "retry_failed": (
        Annotated[
            bool,
            typer.Option(
                help="Rerun cells recorded as failed (finished cells are always kept).",
                rich_help_panel="Where cells run",
            ),
        ],
        False,
    ),
}


def parse_numbers(text: str, flag: str, kind: type = int) -> tuple:
    """'1,2,4' -> (1, 2, 4) (kind int or float); typer.BadParameter naming the flag when an
    item is not a number of that kind or the list is empty."""
    try:
        out = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise typer.BadParameter(f"{flag} takes comma-separated {what}, got {text!r}") from None
    if not out:
        raise typer.BadParameter(f"{flag} is empty")
    return out


def parse_gpu_list(text: str) -> list[int]:
    """'0,1' -> [0, 1]; 'all' -> every visible GPU. typer.BadParameter otherwise."""
    if text.strip().lower() == "all":
        from jouleprof.bench.executors import visible_gpu_indices

        ids = visible_gpu_indices()
        if not ids:
            raise typer.BadParameter("--parallel-gpus all: no GPU is visible here (NVML)")
        return ids
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"--parallel-gpus takes GPU indices like 0,1, got {text!r}"
        ) from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise typer.BadParameter(f"--parallel-gpus needs distinct GPU indices ≥ 0, got {text!r}")
    return ids


def build_run_options(
    executor: str = "local",
    parallel_gpus: str | None = None,
    cooldown_max_s: float = 60.0,
    slurm_partition: str | None = None,
    slurm_account: str | None = None,
    slurm_time: int | None = None,
    slurm_max_parallel: int = 8,
    slurm_cpus: int | None = None,
    slurm_mem_gb: float | None = None,
    retry_failed: bool = False,
) -> RunOptions:
    """RunOptions from the flags; ValueError / typer.BadParameter for a bad combination."""
    slurm_set = [
        f"--{k.replace('_', '-')}"
        for k, v in (
            ("slurm_partition", slurm_partition),
            ("slurm_account", slurm_account),
            ("slurm_time", slurm_time),
            ("slurm_cpus", slurm_cpus),
            ("slurm_mem_gb", slurm_mem_gb),
        )
        if v is not None
    ]
    if executor == "local":
        if slurm_set:
            raise ValueError(f"{', '.join(slurm_set)} need --executor slurm")
        from jouleprof.bench.cooldown import CooldownConfig
        from jouleprof.bench.executors import LocalExecutor

        if cooldown_max_s < 0:
            raise ValueError(f"--cooldown-max-s must be ≥ 0, got {cooldown_max_s}")
        cool = CooldownConfig(max_s=cooldown_max_s) if cooldown_max_s > 0 else None
        gpus = parse_gpu_list(parallel_gpus) if parallel_gpus is not None else None
        return RunOptions(LocalExecutor(gpus=gpus, cooldown=cool), retry_failed, "local")
    if executor == "slurm":
        if parallel_gpus is not None:
            raise ValueError("--parallel-gpus runs cells on this machine: use --executor local")
        from jouleprof.bench.executors_slurm import SlurmConfig, SlurmExecutor

        cfg = SlurmConfig(
            partition=slurm_partition,
            account=slurm_account,
            time_min=slurm_time,
            max_parallel=slurm_max_parallel,
            cpus_per_task=slurm_cpus,
            mem_gb=slurm_mem_gb,
        )
        return RunOptions(SlurmExecutor(cfg), retry_failed, "slurm")
    raise ValueError(f"unknown --executor {executor!r}: choose local or slurm")


def run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared flags to a typer command; it receives them as `run_options`."""
    sig = inspect.signature(fn, eval_str=True)
    if "run_options" not in sig.parameters:
        raise TypeError(f"{fn.__name__} must accept a run_options parameter")
    params = [p for n, p in sig.parameters.items() if n != "run_options"]
    taken = {p.name for p in params}
    clash = taken & set(_OPTIONS)
    if clash:
        raise TypeError(f"{fn.__name__} already has the shared options {sorted(clash)}")
    for name, (annotation, default) in _OPTIONS.items():
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flags = {k: kwargs.pop(k) for k in list(kwargs) if k in _OPTIONS}
        try:
            opts = build_run_options(**flags)
        except (ValueError, ImportError) as e:
            fail(str(e))
        return fn(*args, run_options=opts, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper
