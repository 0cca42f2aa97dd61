"""A study matrix: cells, each one process writing one run directory, run by an executor.

Every study (V-JEPA2, video, BERT, energy-aware, ...) builds a list of `Cell`s and calls
`run_matrix`. The study directory holds study.json (the spec: a rerun with another spec is
refused), cells/<cell_id>/ (cell.json, cell.log, the run directory the cell writes, error.txt when
it failed) and runs.csv, rebuilt after every cell so results land as they come.

A cell is done when its run.json says complete (or out of memory: that is a result too); done
cells are skipped on a rerun, so an interrupted study resumes. A cell that exits non-zero or
leaves no complete run.json is failed: its error goes to error.txt and the study goes on;
`retry_failed=True` runs failed cells again. A cell killed by a signal (preemption, a cancelled
Slurm job, the OOM killer, Ctrl-C) is incomplete and is rerun by the next run_matrix call, as a
crash would be. A rerun moves an earlier attempt's directory to attempts/ rather than delete it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from jouleprof.bench.index import CELLS_DIR, cell_status, write_index

log = logging.getLogger(__name__)

STUDY_JSON = "study.json"
CELL_JSON = "cell.json"
CELL_LOG = "cell.log"
ERROR_TXT = "error.txt"
ATTEMPTS_DIR = "attempts"
CELL_WALL_CSV = "cell_wall.csv"
DONE = ("complete", "oom")
_ID = re.compile(r"[A-Za-z0-9._-]+")


def write_cell_error(cell_dir: Path, exc: BaseException) -> str:
    """A cell's own failure into its error.txt: "Type: message" first (the line runs.csv
    shows), then the traceback. Returns that first line."""
    import traceback

    first = f"{type(exc).__name__}: {exc}"
    Path(cell_dir).mkdir(parents=True, exist_ok=True)
    (Path(cell_dir) / ERROR_TXT).write_text(
        f"{first}\n\n{''.join(traceback.format_exception(exc))}"
    )
    return first


@dataclass(frozen=True)
class Cell:
    """One cell of a study: a command that writes one run directory."""

    cell_id: str
    """Unique in the study and filesystem-safe ([A-Za-z0-9._-]+)."""
    argv: tuple[str, ...]
    """The command; every "{cell_dir}" in it becomes the cell's directory (absolute path)."""
    factors: dict[str, Any] = field(default_factory=dict)
    """The cell's coordinates (model, method, seed, ...): written to cell.json and runs.csv."""
    timeout_s: float = 1800.0
    """Kill the cell after this many seconds (it is then failed)."""
    gpus: int = 1
    """GPUs the cell needs (0: a CPU-only cell; > 1: launched through torchrun)."""

    def __post_init__(self) -> None:
        if not isinstance(self.cell_id, str) or not _ID.fullmatch(self.cell_id):
            raise ValueError(f"cell_id {self.cell_id!r} must match [A-Za-z0-9._-]+")
        if self.cell_id in (".", ".."):
            raise ValueError(f"cell_id {self.cell_id!r} is not a directory name")
        if isinstance(self.argv, str) or not self.argv:
            raise ValueError(f"cell {self.cell_id}: argv must be a non-empty tuple of strings")
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        if not self.timeout_s > 0:
            raise ValueError(f"cell {self.cell_id}: timeout_s must be > 0, got {self.timeout_s}")
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise ValueError(f"cell {self.cell_id}: gpus must be an integer ≥ 0, got {self.gpus}")
        object.__setattr__(self, "factors", dict(self.factors))

    def command(self, cell_dir: Path) -> list[str]:
        """argv with "{cell_dir}" replaced by the cell's absolute directory."""
        d = str(Path(cell_dir).absolute())
        return [a.replace("{cell_dir}", d) for a in self.argv]


@dataclass
class MatrixResult:
    """Where every cell stands after `run_matrix`: each cell_id is in exactly one of done,
    failed and skipped."""

    out: Path
    done: list[str] = field(default_factory=list)
    """Complete or out of memory (this call or an earlier one)."""
    failed: list[str] = field(default_factory=list)
    """Failed or incomplete (killed): see runs.csv's error column and the cell's error.txt."""
    skipped: list[str] = field(default_factory=list)
    """Not run: a skip rule said so, the time budget was spent, or the study was stopped."""
    ran: list[str] = field(default_factory=list)
    """The cells this call ran (or, on Slurm, waited for), in the order they were started."""
    statuses: dict[str, str] = field(default_factory=dict)
    """cell_id -> complete | oom | failed | incomplete | missing | a skip rule's status."""
    index_path: Path | None = None
    """runs.csv."""


SkipRule = Callable[[Cell, Mapping[str, str]], "tuple[str, str] | None"]
"""(cell, every cell's status now) -> (status, why) to skip the cell, or None to run it."""


class Executor(Protocol):
    """Runs a plan's cells: takes them from `plan.take()` (or all at once, `plan.take_all()`),
    runs each cell's command in `plan.prepare(cell)` and reports back through `plan.finish`."""

    def execute(self, plan: Plan) -> None: ...


def cell_dir(out: Path, cell_id: str) -> Path:
    return Path(out) / CELLS_DIR / cell_id


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


_STUDY_RECORD_KEYS = ("created", "resumed", "extended")


def _extends(old: Any, new: Any) -> bool:
    """Whether `new` is the list `old` with items appended (and not `old` itself)."""
    return (
        isinstance(old, list)
        and isinstance(new, list)
        and len(new) > len(old)
        and new[: len(old)] == old
    )


def write_study_json(out: Path, study: Mapping[str, Any], extendable: Collection[str] = ()) -> None:
    """study.json: the spec plus when it was created, resumed and extended; another spec is
    refused, except that a field named in `extendable` (a list, e.g. the confirmation's seeds)
    may grow by items appended to it: the study resumes with the longer list, and study.json's
    `extended` records the field, both values and when."""
    p = out / STUDY_JSON
    d = json.loads(json.dumps(dict(study), default=str))
    if p.is_file():
        try:
            old = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{p} is unreadable ({e}): choose another --out") from None
        old_spec = {k: v for k, v in old.items() if k not in _STUDY_RECORD_KEYS}
        changed = sorted(k for k in set(d) | set(old_spec) if d.get(k) != old_spec.get(k))
        grown = [k for k in changed if k in extendable and _extends(old_spec.get(k), d.get(k))]
        refused = [k for k in changed if k not in grown]
        if refused:
            hint = ""
            if any(k in extendable for k in refused):
                hint = f" ({', '.join(sorted(extendable))} may only grow, by items appended)"
            raise ValueError(
                f"{out} holds a different study ({STUDY_JSON} differs in {', '.join(refused)}"
                f"){hint}: resume it with the same settings or choose another --out"
            )
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        d["created"] = old.get("created")
        d["resumed"] = [*old.get("resumed", []), now]
        extended = list(old.get("extended", []))
        extended += [{"field": k, "from": old_spec[k], "to": d[k], "at": now} for k in grown]
        if extended:
            d["extended"] = extended
    else:
        d["created"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    _write_json(p, d)


def read_cell_json(cdir: Path) -> dict[str, Any]:
    try:
        return json.loads((cdir / CELL_JSON).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no cell.log)"


def settle(cell: Cell, cdir: Path, exit_code: int | None, why: str = "") -> tuple[str, str]:
    """Record how a cell's process ended; returns its (status, error).

    A non-zero exit (or a run.json that is not complete) makes the cell failed: error.txt gets
    the error (the cell's own first, then the exit code and cell.log's last lines) and, where the
    cell wrote no run.json, a run.json with status failed is written. A process killed by a
    signal (negative exit code, or None: cancelled) with no error of its own is incomplete.
    """
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import RunRecord, RunStatus

    status, err = cell_status(cdir)
    killed = exit_code is None or exit_code < 0
    if status in DONE and (exit_code == 0 or killed or status == "oom"):
        return status, err  # a result, even where the process was killed after writing it
    if killed and not (cdir / ERROR_TXT).is_file():
        if not why:
            why = "cancelled" if exit_code is None else f"killed by signal {-exit_code}"
        return "incomplete", f"{why} (a rerun redoes it)"
    if status == "complete":
        reason = f"exited with code {exit_code} although its run.json says complete"
    elif status == "failed":
        reason = err or f"exited with code {exit_code}"
    elif not (cdir / "run.json").is_file():
        reason = f"exited with code {exit_code} without writing run.json"
    else:
        reason = f"exited with code {exit_code}; its run.json is not complete"
    if why:
        reason = why
    own = (cdir / ERROR_TXT).read_text(errors="replace") if (cdir / ERROR_TXT).is_file() else ""
    text = (own.rstrip() + "\n\n" if own else f"{reason}\n\n") + (
        f"--- exit code {exit_code}; last lines of {CELL_LOG} ---\n{_tail(cdir / CELL_LOG)}\n"
    )
    (cdir / ERROR_TXT).write_text(text)
    if not (cdir / "run.json").is_file():
        rec = RunRecord(
            run_id=f"cell-{cell.cell_id}",
            kind="study-cell",
            status=RunStatus.FAILED,
            config={"argv": list(cell.argv), "factors": cell.factors},
            notes=[text.splitlines()[0]],
        )
        RunDir(cdir).write_record(rec)
    return cell_status(cdir)


class Plan:
    """The matrix's queue of cells and their statuses, shared by an executor's workers."""

    def __init__(
        self,
        out: Path,
        cells: Sequence[Cell],
        retry_failed: bool,
        skip: SkipRule | None,
        time_budget_s: float | None,
        report: Callable[[Cell, str], None],
    ) -> None:
        self.out, self.cells = out, list(cells)
        self.retry_failed, self.skip, self.time_budget_s = retry_failed, skip, time_budget_s
        self.report = report
        self.lock = threading.RLock()
        self.started: float | None = None  # the time budget counts from the first take
        self.stopped = False
        self.statuses: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.overrides: dict[str, tuple[str, str]] = {}
        self.ran: list[str] = []
        for c in self.cells:
            self.statuses[c.cell_id], self.errors[c.cell_id] = cell_status(cell_dir(out, c.cell_id))
        self._queue = list(self.cells)

    @functools.cached_property
    def launch_env(self) -> dict[str, str]:
        """Environment entries every cell of this call gets: the git record of the checkout the
        study runs in, taken once (`hardware.git_record_env`)."""
        from jouleprof.hardware import git_record_env

        return git_record_env(Path.cwd())

    def stop(self) -> None:
        """Start no further cell (Ctrl-C, a dying worker)."""
        with self.lock:
            self.stopped = True

    def _runnable(self, cell: Cell) -> bool:
        status = self.statuses[cell.cell_id]
        if status in DONE or (status == "failed" and not self.retry_failed):
            self.report(cell, f"{status} (done before)")
            return False
        if self.skip is not None:
            verdict = self.skip(cell, dict(self.statuses))
            if verdict is not None:
                self.overrides[cell.cell_id] = verdict
                self.statuses[cell.cell_id] = verdict[0]
                self.report(cell, f"{verdict[0]} (skipped: {verdict[1]})")
                self.write_index()
                return False
        budget = self.time_budget_s
        if self.started is None:
            self.started = time.monotonic()
        if budget is not None and time.monotonic() - self.started > budget:
            self.report(cell, "not started: time budget spent (rerun to resume)")
            return False
        return True

    def take(self) -> Cell | None:
        """The next cell to run; None when none is left."""
        with self.lock:
            while self._queue and not self.stopped:
                cell = self._queue.pop(0)
                if self._runnable(cell):
                    self.ran.append(cell.cell_id)  # in the order cells start
                    return cell
            return None

    def take_all(self) -> list[Cell]:
        """Every cell left to run (an executor that submits the matrix at once)."""
        out = []
        while (c := self.take()) is not None:
            out.append(c)
        return out

    def prepare(self, cell: Cell, **attempt: Any) -> Path:
        """Make the cell's directory ready (an earlier attempt moved to attempts/) and write
        cell.json; `attempt` (host, gpus, job id, ...) is recorded in it."""
        cdir = cell_dir(self.out, cell.cell_id)
        history: list[dict[str, Any]] = []
        if cdir.exists():
            history = read_cell_json(cdir).get("attempts", [])
            n = len(history) or 1
            dest = self.out / ATTEMPTS_DIR / f"{cell.cell_id}.{n}"
            while dest.exists():
                n += 1
                dest = self.out / ATTEMPTS_DIR / f"{cell.cell_id}.{n}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(cdir), str(dest))
        cdir.mkdir(parents=True)
        entry = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": os.uname().nodename}
        self._write_cell_json(cell, cdir, [*history, {**entry, **attempt}])
        return cdir

    @staticmethod
    def _write_cell_json(cell: Cell, cdir: Path, attempts: list[dict[str, Any]]) -> None:
        _write_json(
            cdir / CELL_JSON,
            {
                "cell_id": cell.cell_id,
                "factors": cell.factors,
                "argv": list(cell.argv),
                "command": cell.command(cdir),
                "timeout_s": cell.timeout_s,
                "gpus": cell.gpus,
                "attempts": attempts,
            },
        )

    def update_attempt(self, cell: Cell, **info: Any) -> None:
        """Add to the current attempt's record in cell.json (cooldown, job id, ...)."""
        cdir = cell_dir(self.out, cell.cell_id)
        attempts = read_cell_json(cdir).get("attempts", []) or [{}]
        attempts[-1] = {**attempts[-1], **info}
        self._write_cell_json(cell, cdir, attempts)

    def finish(
        self, cell: Cell, exit_code: int | None, wall_s: float, why: str = "", **info: Any
    ) -> str:
        """Record a cell's end (exit code None: it never ran to an exit, e.g. cancelled);
        rebuilds runs.csv. Returns the cell's status."""
        cdir = cell_dir(self.out, cell.cell_id)
        status, err = settle(cell, cdir, exit_code, why)
        self.update_attempt(
            cell,
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
            exit_code=exit_code,
            wall_s=round(wall_s, 3),
            status=status,
            **({"error": err} if err else {}),
            **info,
        )
        with self.lock:
            self.statuses[cell.cell_id], self.errors[cell.cell_id] = status, err
            _log_cell_wall(self.out, cell.cell_id, wall_s, exit_code, info.get("gpu"))
            self.write_index()
        self.report(cell, status if not err else f"{status}: {err}")
        return status

    def write_index(self) -> Path:
        with self.lock:
            return write_index(
                self.out, [(c.cell_id, c.factors) for c in self.cells], self.overrides
            )


def _log_cell_wall(out: Path, cell_id: str, wall_s: float, code: int | None, gpu: Any) -> None:
    """cell_wall.csv: each cell's whole wall time (start to exit), for planning the next study."""
    import csv

    p = out / CELL_WALL_CSV
    new = not p.is_file()
    with p.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["cell_id", "finished_at", "wall_s", "exit_code", "gpu"])
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        w.writerow(
            [
                cell_id,
                stamp,
                f"{wall_s:.2f}",
                "" if code is None else code,
                "" if gpu is None else gpu,
            ]
        )


def _check_cells(cells: Sequence[Cell]) -> None:
    seen: set[str] = set()
    for c in cells:
        if not isinstance(c, Cell):
            raise ValueError(f"cells must be Cell objects, got {type(c).__name__}")
        if c.cell_id in seen:
            raise ValueError(f"cell_id {c.cell_id!r} appears twice: cell ids must be unique")
        seen.add(c.cell_id)


def run_matrix(
    out: str | Path,
    study: Mapping[str, Any],
    cells: Sequence[Cell],
    *,
    executor: str | Executor = "local",
    retry_failed: bool = False,
    progress: bool = True,
    skip: SkipRule | None = None,
    time_budget_s: float | None = None,
    on_cell: Callable[[Cell, str], None] | None = None,
    extendable: Collection[str] = (),
) -> MatrixResult:
    """Run (or resume) a study's cells into `out`.

    Args:
        out: the study directory (created).
        study: the study's spec (JSON-able), written to study.json; a rerun with a different
            spec into the same `out` is refused (ValueError naming the fields that differ).
        cells: the matrix, in the order to start the cells.
        executor: "local" (one cell at a time here), "slurm" (one submitit job array; see
            `executors.SlurmExecutor` for its settings) or an Executor object.
        retry_failed: rerun cells recorded as failed (killed cells are always rerun).
        progress: a rich progress bar on stderr, one line per cell.
        skip: decides, just before a cell would start, to skip it (e.g. every larger batch
            size after one ran out of memory).
        time_budget_s: start no new cell after this many seconds (a rerun resumes).
        on_cell: called with (cell, status text) as each cell is settled.
        extendable: spec fields (lists) a resume may lengthen by appending items, e.g. more
            confirmation seeds; any other difference from study.json is refused.
    """
    from jouleprof.bench.executors import make_executor

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a directory: choose another path")
    _check_cells(cells)
    ex = make_executor(executor) if isinstance(executor, str) else executor
    (out / CELLS_DIR).mkdir(parents=True, exist_ok=True)
    write_study_json(out, study, extendable)
    with _progress(progress, len(cells), on_cell) as report:
        plan = Plan(out, cells, retry_failed, skip, time_budget_s, report)
        plan.write_index()
        try:
            ex.execute(plan)
        finally:
            index = plan.write_index()
    res = MatrixResult(out=out, index_path=index, ran=list(plan.ran), statuses=plan.statuses)
    for c in cells:
        s = plan.statuses[c.cell_id]
        if s in DONE:
            res.done.append(c.cell_id)
        elif s in ("failed", "incomplete") and c.cell_id not in plan.overrides:
            res.failed.append(c.cell_id)
        else:
            res.skipped.append(c.cell_id)
    return res


class _progress:
    """A context giving report(cell, status): a progress bar line per cell, plus on_cell."""

    def __init__(self, show: bool, total: int, on_cell) -> None:
        self.show, self.total, self.on_cell = show, total, on_cell
        self.bar = None

    def __enter__(self) -> Callable[[Cell, str], None]:
        if self.show:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            from jouleprof.cli.console import err_console

            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console,
            )
            self.bar.__enter__()
            self.task = self.bar.add_task("cells", total=self.total)
        return self.report

    def report(self, cell: Cell, status: str) -> None:
        if self.bar is not None:
            self.bar.console.print(f"{cell.cell_id:>20s}  {status}", highlight=False, markup=False)
            self.bar.advance(self.task)
        if self.on_cell is not None:
            self.on_cell(cell, status)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
