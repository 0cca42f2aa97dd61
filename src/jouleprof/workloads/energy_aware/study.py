"""The energy-aware study: architectures × datasets × λ × seeds, each cell its own measured run.

`EnergyStudySpec` names the matrix; `matrix_cells(spec)` turns it into `bench.matrix.Cell`s
whose command runs one cell in its own process (``python -m
jouleprof.workloads.energy_aware.cell SPEC_JSON {cell_dir}``); `run_study` hands them to
`bench.matrix.run_matrix`, which skips finished cells on a rerun (resume), records failures as
rows and rebuilds runs.csv after every cell.

Cells run in seed-major order — every (architecture, dataset, λ) of seed 0, then of seed 1, ... —
shuffled within a seed by a fixed permutation, so that a drift of the GPU over the study (its
temperature, its power controller) lines up with no factor, and a study stopped by its time
budget leaves whole replicates of the design.

`in_process=True` runs every cell in this one process (through the matrix's slot executor),
one after another, each still with its own run directory, run.json and measurement window: a
fresh Python with torch and CUDA costs ~3–5 s per cell, more than a small cell's work. What a
process per cell isolates, and this mode does not: a crash ends the remaining cells (a rerun
resumes them), and CUDA's caching allocator and cuBLAS workspaces persist between cells — the
warm-up of each cell (a throwaway copy trains a few steps before the measurement) puts every
cell, first or not, in that warm state.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.energy_aware.regularizer import KINDS
from jouleprof.workloads.energy_aware.datasets import DATASETS
from jouleprof.workloads.energy_aware.models import ARCH_FIELDS, ARCHS

CELL_MODULE = "jouleprof.workloads.energy_aware.cell"
DEFAULT_LAMBDAS = (0.0, 1e-5, 1e-4, 1e-3, 1e-2)


@dataclass(frozen=True)
class EnergyStudySpec:
    """The matrix and the settings every cell shares (CLI flags of `study energy-aware`)."""

    archs: tuple[str, ...] = ("mlp", "cnn", "vit-tiny")
    """Architecture presets (models.ARCHS)."""
    datasets: tuple[str, ...] = ("digits", "synthetic", "shapes")
    """Dataset names (datasets.DATASETS)."""
    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS
    """Penalty weights λ (each ≥ 0)."""
    seeds: int = 3
    """Seeds per (arch, dataset, λ): 0..seeds-1."""
    kind: str = "l1"
    """What E counts (l1, l2, nonzero-macs)."""
    reduction: str = "sum"
    """E summed per sample ("sum") or averaged per hooked element ("mean")."""
    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-3
    infer_passes: int = 5
    warmup_steps: int = 3
    precision: str = "fp32"
    arch_overrides: dict[str, Any] = field(default_factory=dict)
    """ArchConfig fields applied to every architecture (width, depth, ...)."""
    data_dir: str | None = None
    """Folder of the local datasets (mnist, fashion-mnist, cifar10): DATA_DIR/<name>/ if it
    exists, else DATA_DIR itself."""
    data_n: int | None = None
    data_side: int | None = None
    device: str = "auto"
    idle_s: float = 0.5
    simulate_gpu_w: float | None = None
    cell_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        def check(name: str, given, valid) -> None:
            if not given:
                raise ValueError(f"{name} is empty: choose from {', '.join(valid)}")
            bad = [g for g in given if g not in valid]
            if bad:
                raise ValueError(f"unknown {name} {bad}: choose from {', '.join(valid)}")
            if len(set(given)) != len(given):
                raise ValueError(f"{name} lists a value twice: {list(given)}")

        check("archs", self.archs, tuple(ARCHS))
        check("datasets", self.datasets, DATASETS)
        if not self.lambdas:
            raise ValueError("lambdas is empty: give one or more λ ≥ 0, e.g. 0,1e-4,1e-2")
        bad = [v for v in self.lambdas if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ValueError(f"lambdas must be finite and ≥ 0, got {bad}")
        if len(set(self.lambdas)) != len(self.lambdas):
            raise ValueError(f"lambdas lists a value twice: {list(self.lambdas)}")
        if self.seeds < 1:
            raise ValueError(f"seeds must be ≥ 1, got {self.seeds}")
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        bad_f = [k for k in self.arch_overrides if k not in ARCH_FIELDS]
        if bad_f:
            raise ValueError(f"unknown arch field(s) {bad_f}: valid are {', '.join(ARCH_FIELDS)}")
        if not self.cell_timeout_s > 0:
            raise ValueError(f"cell_timeout_s must be > 0, got {self.cell_timeout_s}")
        self.cell_specs()  # builds every CellSpec: their field checks run now

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["study"] = "energy-aware"
        return d

    def _data_dir(self, dataset: str) -> str | None:
        if self.data_dir is None:
            return None
        sub = Path(self.data_dir) / dataset
        return str(sub) if sub.is_dir() else self.data_dir

    def cell_specs(self) -> list[tuple[str, Any]]:
        """(cell_id, CellSpec) in run order (see the module docstring)."""
        from jouleprof.workloads.energy_aware.cell import CellSpec

        out = []
        for seed in range(self.seeds):
            block = [(a, d, lam) for a in self.archs for d in self.datasets for lam in self.lambdas]
            random.Random(1000 + seed).shuffle(block)
            for arch, ds, lam in block:
                spec = CellSpec(
                    arch=arch,
                    dataset=ds,
                    lam=lam,
                    seed=seed,
                    kind=self.kind,
                    reduction=self.reduction,
                    epochs=self.epochs,
                    batch_size=self.batch_size,
                    lr=self.lr,
                    infer_passes=self.infer_passes,
                    warmup_steps=self.warmup_steps,
                    precision=self.precision,
                    arch_overrides=dict(self.arch_overrides),
                    data_dir=self._data_dir(ds),
                    data_n=self.data_n,
                    data_side=self.data_side,
                    device=self.device,
                    idle_s=self.idle_s,
                    simulate_gpu_w=self.simulate_gpu_w,
                )
                out.append((cell_id(arch, ds, lam, seed), spec))
        return out


def cell_id(arch: str, dataset: str, lam: float, seed: int) -> str:
    return f"{arch}.{dataset}.lam{lam:g}.s{seed}"


def matrix_cells(spec: EnergyStudySpec) -> list[Any]:
    """The study's `bench.matrix.Cell`s (each one process running one cell)."""
    from jouleprof.bench.matrix import Cell

    gpu = 0 if spec.device == "cpu" else 1
    cells = []
    for cid, cs in spec.cell_specs():
        cells.append(
            Cell(
                cell_id=cid,
                argv=(sys.executable, "-m", CELL_MODULE, json.dumps(cs.to_json()), "{cell_dir}"),
                factors={
                    "arch": cs.arch,
                    "dataset": cs.dataset,
                    "lam": cs.lam,
                    "seed": cs.seed,
                    "kind": cs.kind,
                },
                timeout_s=spec.cell_timeout_s,
                gpus=gpu,
            )
        )
    return cells


class InProcessSlot:
    """A slot of the matrix's local executor that runs a cell in this process: parses the
    cell's spec from its command, runs it into its directory, returns an exit code as the
    cell's own process would (0 done, 3 out of memory, 1 failed with error.txt)."""

    gpu = None

    def __init__(self) -> None:
        from jouleprof.workloads.energy_aware.cell import DataCache

        self.cache = DataCache()

    def __call__(self, cell: Any, cdir: Path) -> int:
        from jouleprof.workloads.energy_aware.cell import EXIT_OOM, run_cell, spec_from_json

        handler = logging.FileHandler(cdir / "cell.log")
        root = logging.getLogger()
        root.addHandler(handler)
        t0 = time.perf_counter()
        try:
            spec = spec_from_json(json.loads(cell.argv[3]))
            run_cell(spec, cdir, self.cache)
            from jouleprof.store.rundir import RunDir

            oom = RunDir(cdir).read_record().extra.get("oom")
            with (cdir / "cell.log").open("a") as f:
                f.write(f"ran in process in {time.perf_counter() - t0:.2f} s\n")
            return EXIT_OOM if oom else 0
        except Exception as e:  # the cell's failure is its row; the study goes on
            from jouleprof.bench.matrix import write_cell_error

            write_cell_error(cdir, e)
            return 1
        finally:
            root.removeHandler(handler)
            handler.close()


def run_study(
    spec: EnergyStudySpec,
    out: Path,
    *,
    in_process: bool = False,
    time_budget_s: float | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    executor: str = "local",
):
    """Run (or resume) the study into `out`; returns the matrix's MatrixResult."""
    from jouleprof.bench.matrix import run_matrix

    ex: Any = executor
    if in_process:
        from jouleprof.bench.executors import LocalExecutor

        ex = LocalExecutor(slots=[InProcessSlot()])
    return run_matrix(
        out,
        spec.to_json(),
        matrix_cells(spec),
        executor=ex,
        retry_failed=retry_failed,
        progress=progress,
        time_budget_s=time_budget_s,
    )
