"""A study: a matrix of training cells (batch size × mode × repetition), each its own process.

`run_study(spec, out)` writes study.json, runs every cell that is not already finished (so an
interrupted study resumes: finished cells are skipped, an incomplete one is redone), and rebuilds
runs.csv after each cell, so every cell's raw CSVs survive a crash of a later one. A cell that
runs out of memory is recorded as such and the study goes on; that batch size and every larger one
are then skipped in every mode and repetition (recorded as "oom (skipped)"): the modes differ in
what they measure, not in what the step allocates, so one out-of-memory cell settles the size.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.bench.index import CELLS_DIR, cell_status, write_index
from jouleprof.bench.train import MODES

log = logging.getLogger(__name__)

STUDY_JSON = "study.json"


@dataclass(frozen=True)
class StudySpec:
    """The matrix (CLI flags of `jouleprof study` map onto these)."""

    workload: str = "vjepa2"
    preset: str = "vit_huge"
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    modes: tuple[str, ...] = ("baseline", "e2e", "fine")
    reps: int = 3
    duration_s: float = 60.0
    """Measured seconds per cell (after warm-up)."""
    data: str = "fake"
    overhead_pairs: int = 2
    """Fine cells: interleaved overhead block pairs (the precise overhead figure comes from a
    dedicated `profile --overhead-pairs 6` run; here it is a per-cell check)."""
    overhead_block_steps: int = 4
    """Steps per overhead block in fine cells."""
    isolation_s: float = 0.0
    """Fine cells of rep 0: seconds to replay each phase alone (0: skip)."""
    gpus: tuple[int, ...] | None = None
    cell_timeout_s: float = 1800.0
    skip_larger_after_oom: bool = True
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad:
            raise ValueError(f"unknown mode(s) {bad}: choose from {', '.join(MODES)}")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes must be ≥ 1, got {list(self.batch_sizes)}")
        if self.reps < 1:
            raise ValueError(f"reps must be ≥ 1, got {self.reps}")
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cells(spec: StudySpec) -> list[dict[str, Any]]:
    """The cells in run order: repetition-major, so a drift over time does not line up with a
    factor; modes vary fastest so each batch size's modes run close together."""
    out = []
    for rep in range(spec.reps):
        for bs in spec.batch_sizes:
            for mode in spec.modes:
                out.append(
                    {"cell_id": f"bs{bs}-{mode}-r{rep}", "batch_size": bs, "mode": mode, "rep": rep}
                )
    return out


def cell_config(spec: StudySpec, cell: dict[str, Any]) -> dict[str, Any]:
    fine = cell["mode"] == "fine"
    return {
        "workload": spec.workload,
        "preset": spec.preset,
        "batch_size": cell["batch_size"],
        "mode": cell["mode"],
        "duration_s": spec.duration_s,
        "data": spec.data,
        "overhead_pairs": spec.overhead_pairs if fine else 0,
        "overhead_block_steps": spec.overhead_block_steps,
        "isolation_s": spec.isolation_s if fine and cell["rep"] == 0 else 0.0,
        "gpus": list(spec.gpus) if spec.gpus is not None else None,
        "overrides": spec.overrides,
    }


def _write_spec(out: Path, spec: StudySpec) -> None:
    p = out / STUDY_JSON
    d = spec.to_json()
    if p.is_file():
        old = json.loads(p.read_text())
        old_spec = {k: v for k, v in old.items() if k not in ("created", "resumed")}
        if json.loads(json.dumps(d)) != old_spec:
            raise ValueError(
                f"{out} holds a different study ({STUDY_JSON} differs): resume it with the same "
                "flags or choose another --out"
            )
        d["created"] = old.get("created")
        d["resumed"] = [*old.get("resumed", []), time.strftime("%Y-%m-%dT%H:%M:%S")]
    else:
        d["created"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    p.write_text(json.dumps(d, indent=2))


CELL_WALL_CSV = "cell_wall.csv"


def _log_cell_wall(
    out: Path, cell_id: str, wall_s: float, exit_code: int, gpu: int | None = None
) -> None:
    """Append each cell's whole wall time (process start to exit) to cell_wall.csv: what a
    study costs on a machine, for planning the next one; `gpu`: the slot's GPU, if any."""
    p = out / CELL_WALL_CSV
    new = not p.is_file()
    with p.open("a") as f:
        if new:
            f.write("cell_id,finished_at,wall_s,exit_code,gpu\n")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        f.write(f"{cell_id},{stamp},{wall_s:.2f},{exit_code},{'' if gpu is None else gpu}\n")


Runner = Callable[[Path, Path, float], int]
"""Runs one cell (its config file, its directory, a timeout) and returns its exit status."""


def run_study(
    spec: StudySpec,
    out: str | Path,
    runner: Runner | None = None,
    on_cell: Callable[[dict[str, Any], str], None] | None = None,
    time_budget_s: float | None = None,
    slots: Sequence[Runner] | None = None,
) -> Path:
    """Run (or resume) the study into `out`; returns the path of runs.csv.

    Args:
        time_budget_s: start no new cell after this many seconds (the rest waits for a rerun,
            which resumes): for machines lent by the hour, or a job's time limit.
        slots: run this many cells at once, each through its own runner (e.g. one per GPU,
            `executors.gpu_runner`); None: one at a time through `runner`. The cells keep
            their order of starting; a cell's neighbours then share the host's CPUs.
    """
    from jouleprof.bench.executors import local_runner

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a directory: choose another path")
    if slots is not None and not slots:
        raise ValueError("slots must hold at least one runner")
    (out / CELLS_DIR).mkdir(parents=True, exist_ok=True)
    _write_spec(out, spec)
    all_cells = cells(spec)
    state = _Schedule(spec, out, all_cells, on_cell, time_budget_s)
    runners = list(slots) if slots is not None else [runner or local_runner]
    if len(runners) == 1:
        state.work(runners[0])
    else:
        threads = [
            threading.Thread(target=state.work, args=(r,), name=f"study-slot{i}", daemon=True)
            for i, r in enumerate(runners)
        ]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():  # join in slices: Ctrl-C must reach this thread
                t.join(0.5)
        if state.errors:
            raise state.errors[0]
    return write_index(out, all_cells)


class _Schedule:
    """The study's queue of cells, shared by the slots that run them (thread-safe)."""

    def __init__(self, spec, out: Path, all_cells, on_cell, time_budget_s) -> None:
        self.spec, self.out, self.all_cells = spec, out, all_cells
        self.on_cell, self.time_budget_s = on_cell, time_budget_s
        self.queue = deque(all_cells)
        self.lock = threading.Lock()
        self.oom_at: int | None = None  # smallest batch size that ran out of memory
        self.started = time.monotonic()
        self.errors: list[BaseException] = []

    def _say(self, cell, status: str) -> None:
        if self.on_cell:
            self.on_cell(cell, status)

    def _oom(self, bs: int) -> None:
        self.oom_at = bs if self.oom_at is None else min(self.oom_at, bs)

    def take(self) -> tuple[dict[str, Any], Path, Path] | None:
        """The next cell to run, its directory (made ready) and its config file; None when
        none is left."""
        with self.lock:
            while self.queue:
                cell = self.queue.popleft()
                cdir = self.out / CELLS_DIR / cell["cell_id"]
                status, _ = cell_status(cdir)
                bs = cell["batch_size"]
                if status in ("complete", "failed", "oom"):
                    if status == "oom":
                        self._oom(bs)
                    self._say(cell, f"{status} (done before)")
                    continue
                oom_at = self.oom_at
                if self.spec.skip_larger_after_oom and oom_at is not None and bs >= oom_at:
                    why = f"skipped: batch size {oom_at} ran out of memory"
                    cell["status_override"] = ("oom", why)
                    self._say(cell, "oom (skipped)")
                    write_index(self.out, self.all_cells)
                    continue
                budget = self.time_budget_s
                if budget is not None and time.monotonic() - self.started > budget:
                    self._say(cell, "not started: time budget spent (rerun to resume)")
                    continue
                if cdir.exists():  # incomplete: redo it from scratch
                    shutil.rmtree(cdir)
                cdir.mkdir(parents=True)
                cfg_path = cdir.parent / f"{cell['cell_id']}.config.json"
                cfg_path.write_text(json.dumps(cell_config(self.spec, cell), indent=2))
                return cell, cdir, cfg_path
            return None

    def work(self, runner: Runner) -> None:
        try:
            while (taken := self.take()) is not None:
                cell, cdir, cfg_path = taken
                t_cell = time.monotonic()
                code = runner(cfg_path, cdir, self.spec.cell_timeout_s)
                with self.lock:
                    _log_cell_wall(
                        self.out,
                        cell["cell_id"],
                        time.monotonic() - t_cell,
                        code,
                        getattr(runner, "gpu", None),
                    )
                    status, err = cell_status(cdir)
                    if status == "oom":
                        self._oom(cell["batch_size"])
                    elif code != 0 and status == "complete":
                        status = "failed"
                    self._say(cell, status if not err else f"{status}: {err}")
                    write_index(self.out, self.all_cells)
        except BaseException as e:  # a slot that dies stops taking cells; the study says why
            with self.lock:
                self.errors.append(e)
                self.queue.clear()
            if threading.current_thread() is threading.main_thread():
                raise
