"""The V-JEPA2 study: training cells (batch size × mode × repetition), run by bench/matrix.py.

`run_study(spec, out)` builds the matrix's cells (each `python -m jouleprof.bench.cellmain
CONFIG OUT`) and hands them to `run_matrix`, which writes study.json, runs every cell that is not
already finished (so an interrupted study resumes: finished cells are skipped, an incomplete one
is redone), and rebuilds runs.csv after each cell, so every cell's raw CSVs survive a crash of a
later one. A cell that
runs out of memory is recorded as such and the study goes on; that batch size and every larger one
are then skipped in every mode and repetition (recorded as "oom (skipped)"): the modes differ in
what they measure, not in what the step allocates, so one out-of-memory cell settles the size.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.bench.index import CELLS_DIR
from jouleprof.bench.matrix import Cell, Executor, run_matrix
from jouleprof.bench.train import MODES
from jouleprof.bench.warmup import WarmupRule


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
    max_warmup_steps: int | None = None
    """Stop each cell's warm-up after this many steps (WarmupRule.max_steps); None: the rule's
    default. A CPU's step times rarely settle, so a small study there waits out the default."""

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
        least = WarmupRule().min_steps
        if self.max_warmup_steps is not None and self.max_warmup_steps < least:
            raise ValueError(
                f"max_warmup_steps must be ≥ {least} (the warm-up's minimum), "
                f"got {self.max_warmup_steps}"
            )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if d["max_warmup_steps"] is None:  # a study.json from before the field still matches
            del d["max_warmup_steps"]
        return d


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
        **({"warmup": {"max_steps": spec.max_warmup_steps}} if spec.max_warmup_steps else {}),
    }


Runner = Callable[[Path, Path, float], int]
"""Runs one cell (its config file, its directory, a timeout) and returns its exit status."""


def config_path(out: Path, cell_id: str) -> Path:
    return Path(out).absolute() / CELLS_DIR / f"{cell_id}.config.json"


def matrix_cells(spec: StudySpec, out: Path) -> list[Cell]:
    """The study's cells for `run_matrix`; writes each cell's config file next to its directory."""
    (Path(out) / CELLS_DIR).mkdir(parents=True, exist_ok=True)
    mcells = []
    for c in cells(spec):
        cfg = config_path(out, c["cell_id"])
        cfg.write_text(json.dumps(cell_config(spec, c), indent=2))
        argv = (sys.executable, "-m", "jouleprof.bench.cellmain", str(cfg), "{cell_dir}")
        factors = {k: c[k] for k in ("batch_size", "mode", "rep")}
        mcells.append(Cell(c["cell_id"], argv, factors, timeout_s=spec.cell_timeout_s, gpus=1))
    return mcells


def oom_rule(spec: StudySpec, mcells: Sequence[Cell]):
    """The skip rule: once a batch size ran out of memory, it and every larger one are skipped."""
    size = {c.cell_id: c.factors["batch_size"] for c in mcells}

    def skip(cell: Cell, statuses: Mapping[str, str]) -> tuple[str, str] | None:
        ooms = [size[cid] for cid, s in statuses.items() if s == "oom" and cid in size]
        if ooms and cell.factors["batch_size"] >= min(ooms):
            return "oom", f"skipped: batch size {min(ooms)} ran out of memory"
        return None

    return skip if spec.skip_larger_after_oom else None


def _as_slot(runner: Runner, out: Path):
    def slot(cell: Cell, cdir: Path) -> int:
        return runner(config_path(out, cell.cell_id), cdir, cell.timeout_s)

    if hasattr(runner, "gpu"):
        slot.gpu = runner.gpu  # type: ignore[attr-defined]
    return slot


def run_study(
    spec: StudySpec,
    out: str | Path,
    runner: Runner | None = None,
    on_cell: Callable[[dict[str, Any], str], None] | None = None,
    time_budget_s: float | None = None,
    slots: Sequence[Runner] | None = None,
    *,
    executor: str | Executor | None = None,
    retry_failed: bool = False,
    progress: bool = False,
) -> Path:
    """Run (or resume) the study into `out`; returns the path of runs.csv.

    Args:
        runner: run each cell through this function instead of a process (tests, wrappers).
        time_budget_s: start no new cell after this many seconds (the rest waits for a rerun,
            which resumes): for machines lent by the hour, or a job's time limit.
        slots: run this many cells at once, each through its own runner; None: one at a time.
        executor: a matrix executor ("local", "slurm" or an Executor object); not with
            runner/slots.
        retry_failed: run cells recorded as failed again.
        progress: the matrix's progress bar on stderr.
    """
    from jouleprof.bench.executors import LocalExecutor

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a directory: choose another path")
    if slots is not None and not slots:
        raise ValueError("slots must hold at least one runner")
    if executor is not None and (runner is not None or slots is not None):
        raise ValueError("give an executor or runner/slots, not both")
    if slots is not None or runner is not None:
        executor = LocalExecutor(slots=[_as_slot(r, out) for r in (slots or [runner])])
    mcells = matrix_cells(spec, out)

    def say(cell: Cell, status: str) -> None:
        if on_cell is not None:
            on_cell({"cell_id": cell.cell_id, **cell.factors}, status)

    res = run_matrix(
        out,
        spec.to_json(),
        mcells,
        executor=executor or "local",
        retry_failed=retry_failed,
        progress=progress,
        skip=oom_rule(spec, mcells),
        time_budget_s=time_budget_s,
        on_cell=say,
    )
    assert res.index_path is not None
    return res.index_path
