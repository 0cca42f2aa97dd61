"""The feasibility probe: which model × method × precision × checkpointing × batch cells train,
with their peak memory, seconds and joules per step (`jouleprof probe video`).

Every cell runs in a worker process (`bench.probe_cell`), by default one cell per process, so an
out-of-memory error or a crash is a row, never the end of the probe. Rows land in DIR/probe.csv
as cells finish; a rerun skips cells already there (resume), so a probe can be split over
several calls (`budget_s`, or subsets of models). Cells run most informative first: batch 4
before 1; bf16, then fp32, fp16, int8; full fine-tuning with checkpointing after its plain cell.
Refused method × precision pairs become rows at once (status refused, the reason in `error`).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jouleprof.bench.probe_cell import RESULT_JSON, ProbeCell

PROBE_CSV = "probe.csv"
COLUMNS = (
    "model",
    "method",
    "precision",
    "checkpointing",
    "batch",
    "status",
    "trainable_params",
    "peak_mem_mib",
    "s_per_step",
    "j_per_step",
    "j_per_step_lo",
    "j_per_step_hi",
)
"""The probe's columns, in this order (the issue's contract)."""
EXTRA_COLUMNS = ("error", "energy_note", "total_params", "timed_steps", "timed_s", "cell_wall_s")
"""Appended after COLUMNS: the error of an oom/error/refused row, where the energy came from
(or why it is missing), and the cell's own figures."""
STATUSES = ("ok", "oom", "error", "refused")
_PRECISION_ORDER = ("bf16", "fp32", "fp16", "int8")


def _choices(values: tuple, valid: tuple, what: str) -> None:
    bad = [v for v in values if v not in valid]
    if bad or not values:
        raise ValueError(
            f"unknown {what} {bad or '(none)'}: choose from {', '.join(map(str, valid))}"
        )


@dataclass(frozen=True)
class ProbeSpec:
    """The probe matrix and its protocol (CLI flags of `jouleprof probe video`)."""

    models: tuple[str, ...] = ("videomae-b", "timesformer-b", "swin3d-b", "hiera-b")
    """Video models (the registry's names)."""
    methods: tuple[str, ...] = ("full", "lora", "qlora", "adalora", "bitfit")
    precisions: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
    batch_sizes: tuple[int, ...] = (1, 4)
    checkpointing: tuple[bool, ...] = (False,)
    """Activation checkpointing settings to probe."""
    checkpointing_methods: tuple[str, ...] | None = None
    """Methods that get the checkpointing-on cells (None: every method)."""
    timed_s: float = 5.0
    """Seconds of timed steps per cell, after the warm-up (the protocol: ≥ 5 s)."""
    warmup_steps: int = 3
    num_classes: int = 20
    lr: float = 1e-4
    frames: int | None = None
    """Frames per clip (None: each model's default, 16)."""
    size: int | None = None
    """Frame side (None: each model's default, 224)."""
    tiny: bool = False
    """The models' tiny configs (CPU tests)."""
    cells_per_process: int = 1
    """Cells one worker process runs in a row (1: each cell its own process). A crash ends
    only the cell it happened in: the rest restart in a fresh worker."""
    cell_timeout_s: float = 600.0
    """A worker is killed after cells × this long; its unfinished cell is an error row."""
    share_builds: bool = True
    """Where a worker runs several cells: cells that differ only in batch size run back to back
    on one built model (built, and for a 4-bit or 8-bit base quantized, once); each keeps its
    own warm-up, timed window, peak-memory reset and run directory."""

    def __post_init__(self) -> None:
        from jouleprof.workloads.video.adapt import METHODS
        from jouleprof.workloads.video.models import MODEL_NAMES
        from jouleprof.workloads.video.precision import PRECISIONS

        _choices(self.models, MODEL_NAMES, "model(s)")
        _choices(self.methods, METHODS, "method(s)")
        _choices(self.precisions, PRECISIONS, "precision(s)")
        if self.checkpointing_methods is not None:
            _choices(self.checkpointing_methods, METHODS, "checkpointing method(s)")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError(f"batch_sizes must be ≥ 1, got {self.batch_sizes}")
        if not self.checkpointing:
            raise ValueError("checkpointing needs at least one of off, on")
        if self.timed_s <= 0 or self.warmup_steps < 0:
            raise ValueError("timed_s must be > 0 and warmup_steps ≥ 0")
        if self.cells_per_process < 1 or self.cell_timeout_s <= 0:
            raise ValueError("cells_per_process must be ≥ 1 and cell_timeout_s > 0")

    def opts(self) -> dict[str, Any]:
        """What a worker needs besides the cells."""
        return {
            k: getattr(self, k)
            for k in (
                "timed_s",
                "warmup_steps",
                "num_classes",
                "lr",
                "frames",
                "size",
                "tiny",
                "share_builds",
            )
        }


def plan(spec: ProbeSpec) -> list[ProbeCell]:
    """Every cell of the matrix, most informative first (where builds are shared, the cells of
    one build follow each other, largest batch first, in the order of their largest batch)."""
    cells = []
    for ck in spec.checkpointing:
        for method in spec.methods:
            if (
                ck
                and spec.checkpointing_methods is not None
                and method not in spec.checkpointing_methods
            ):
                continue
            for model in spec.models:
                for prec in spec.precisions:
                    for b in spec.batch_sizes:
                        cells.append(ProbeCell(model, method, prec, ck, b))
    big = max(spec.batch_sizes)

    def rank(c: ProbeCell):
        return (
            c.batch != big,
            c.batch,
            _PRECISION_ORDER.index(c.precision) if c.precision in _PRECISION_ORDER else 9,
            c.checkpointing,
            spec.methods.index(c.method),
            spec.models.index(c.model),
        )

    ranked = sorted(cells, key=rank)
    if not (spec.share_builds and spec.cells_per_process > 1):
        return ranked
    groups: dict[tuple, list[ProbeCell]] = {}
    for c in ranked:
        groups.setdefault(c.build_key, []).append(c)
    return [c for g in groups.values() for c in g]


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _key(row: dict) -> tuple[str, str, str, str, str]:
    return (row["model"], row["method"], row["precision"], row["checkpointing"], str(row["batch"]))


def _cell_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v).replace("\n", " ")


def append_row(path: Path, row: dict[str, Any]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(COLUMNS + EXTRA_COLUMNS)
        w.writerow([_cell_text(row.get(c)) for c in COLUMNS + EXTRA_COLUMNS])
        f.flush()
        os.fsync(f.fileno())


def _rewrite(path: Path, rows: list[dict[str, str]]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS + EXTRA_COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def _run_argv(argv, log_path: Path, env, timeout_s: float, server) -> tuple[int, str]:
    """Run a worker in a session of its own (forked from `server` where given), its output to
    `log_path`: (exit code, why it ended); -9 past `timeout_s`, the worker then killed with its
    children. Ctrl-C reaches the worker too (it writes its cell's run directory)."""
    from jouleprof.bench.executors import interrupt_live_cells, start_process, wait_process

    try:
        p = start_process(argv, log_path, env, server)
    except OSError as e:
        return 127, f"cannot start {argv[0]!r}: {e.strerror or e}"
    try:
        rc = wait_process(p, timeout_s)
    except KeyboardInterrupt:
        interrupt_live_cells()
        raise
    if rc is None:
        return -9, f"timed out after {timeout_s:.0f} s"
    return rc, f"worker exited with status {rc}"


def _log_tail(path: Path, n: int = 6) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-600:]


def run_probe(
    spec: ProbeSpec,
    out: str | Path,
    *,
    budget_s: float | None = None,
    retry_errors: bool = False,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    python: str = sys.executable,
    preload: bool = True,
) -> dict[str, Any]:
    """Run every cell of `spec` not yet in out/probe.csv; returns counts of what happened.

    `preload`: fork every worker from one process that has imported torch, transformers and
    peft once (`cellserver`), instead of a fresh interpreter that imports them again (14–22 s
    a worker on the H200 host); each worker is still its own process."""
    from jouleprof.hardware import git_record_env
    from jouleprof.workloads.video.precision import refusal

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / PROBE_CSV
    rows = read_rows(csv_path)
    if retry_errors and any(r["status"] == "error" for r in rows):
        rows = [r for r in rows if r["status"] != "error"]
        _rewrite(csv_path, rows)
    done = {_key(r) for r in rows}
    (out / "probe_spec.json").write_text(json.dumps(asdict(spec), indent=1))
    todo: list[ProbeCell] = []
    counts = {"skipped": 0, "ran": 0, "left": 0, **{s: 0 for s in STATUSES}}
    for cell in plan(spec):
        if cell.key() in done:
            counts["skipped"] += 1
            continue
        why = refusal(cell.method, cell.precision)
        if why is not None:
            row = {**asdict(cell), "status": "refused", "error": why}
            append_row(csv_path, row)
            counts["refused"] += 1
            if on_row:
                on_row(row)
            continue
        todo.append(cell)
    t0 = time.monotonic()
    cells_dir = out / "cells"
    server = None
    # the checkout's git record, taken once for every worker
    launch_env = git_record_env(Path.cwd()) if todo else {}
    try:
        while todo:
            if budget_s is not None and time.monotonic() - t0 >= budget_s:
                break
            if preload and server is None:
                from jouleprof.bench.cellserver import VIDEO_PRELOAD, start_or_none

                server = start_or_none(VIDEO_PRELOAD, out / "cellserver.log", _worker_env())
                preload = server is not None
            batch, todo = todo[: spec.cells_per_process], todo[spec.cells_per_process :]
            deadline = (
                None if budget_s is None else time.time() + budget_s - (time.monotonic() - t0)
            )
            results, rest = _run_worker(
                batch, cells_dir, spec, python, deadline, server, launch_env
            )
            todo = rest + todo  # cells after a crash restart in a fresh worker
            for row in results:
                append_row(csv_path, row)
                counts[row["status"]] = counts.get(row["status"], 0) + 1
                counts["ran"] += 1
                if on_row:
                    on_row(row)
    finally:
        if server is not None:
            server.close()
    counts["left"] = len(todo)
    return counts


def _worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: this one, with this package's source first on PYTHONPATH, and
    `extra` (the probe's git record, taken once)."""
    env = dict(os.environ)
    env.update(extra or {})
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run_worker(
    cells: list[ProbeCell],
    cells_dir: Path,
    spec: ProbeSpec,
    python: str,
    deadline_unix: float | None = None,
    server=None,
    launch_env: dict[str, str] | None = None,
) -> tuple[list[dict], list[ProbeCell]]:
    """Run `cells` in one worker (forked from `server`, a `cellserver.CellServer`, where given
    and it accepts the command), with `launch_env` in its environment; (their rows, the cells
    to run again: those after a crash, or not started because the budget ran out)."""
    cells_dir.mkdir(parents=True, exist_ok=True)
    items = []
    for c in cells:
        d = cells_dir / c.cell_id
        if d.exists():  # an earlier attempt (crash, kill): keep it aside
            d.rename(d.with_name(f"{d.name}.attempt{int(time.time())}"))
        items.append({"cell": asdict(c), "dir": str(d)})
    job = cells_dir / f"worker_{cells[0].cell_id}.json"
    job.write_text(
        json.dumps({"cells": items, "opts": spec.opts(), "deadline_unix": deadline_unix})
    )
    log_path = job.with_suffix(".log")
    argv = [python, "-m", "jouleprof.bench.probe_cell", str(job)]
    timeout_s = spec.cell_timeout_s * len(cells)
    t = time.monotonic()
    rc, why = _run_argv(argv, log_path, _worker_env(launch_env), timeout_s, server)
    rows, rest = [], []
    for i, (c, it) in enumerate(zip(cells, items, strict=True)):
        res = Path(it["dir"]) / RESULT_JSON
        if res.exists():
            rows.append(json.loads(res.read_text()))
            continue
        if rc == 0:  # the worker stopped at the budget's end: not started, not failed
            rest = cells[i:]
            break
        # The first cell without a result is the one the worker died in.
        tail = _log_tail(log_path)
        rows.append(
            {
                **asdict(c),
                "status": "error",
                "error": f"{why} (rc {rc}) during this cell: {tail}",
                "cell_wall_s": time.monotonic() - t,
            }
        )
        rest = cells[i + 1 :]
        break
    return rows, rest
