"""`jouleprof study video`: the staged search over models × methods × precisions, then a
confirmation, each cell one `jouleprof run video` process through `bench.matrix.run_matrix`.

Stages (each a pure function of the earlier stages' recorded results, so a rerun of the same
command resumes: done cells are skipped and the later stages are derived again identically):

- ``smoke``: one short run per model (a couple of steps, a short deployment loop);
- ``search``: (a) the learning rate per model × method, at the base precision; (b) at each
  method's best learning rate (by validation top-1, then loss), every other precision the
  method allows, and activation checkpointing on at the base precision;
- ``confirm``: per model, the search's best configuration by NS# (validation top-1 where no
  energy was measured), trained `confirm_epochs` epochs for each of `confirm_seeds`, with test.

Every stage's call to `run_matrix` is given every cell known so far, so runs.csv always indexes
the whole study.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STAGES: tuple[str, ...] = ("smoke", "search", "confirm")
PARTS: dict[str, str] = {
    "smoke": "smoke",
    "search-lr": "search",
    "search-ablation": "search",
    "confirm": "confirm",
}
"""The stages' parts and the stage each belongs to; a part may be asked alone (e.g. only the
learning-rate search, to be resumed later with the ablation)."""
DEFAULT_LRS: dict[str, tuple[float, ...]] = {
    "full": (1e-5, 3e-5, 1e-4),
    "lora": (1e-4, 3e-4, 1e-3),
    "qlora": (1e-4, 3e-4, 1e-3),
    "adalora": (1e-4, 3e-4, 1e-3),
    "bitfit": (3e-4, 1e-3, 3e-3),
}


@dataclass(frozen=True)
class VideoStudyConfig:
    """The study (its JSON is study.json: a rerun with other settings into the same folder is
    refused)."""

    models: tuple[str, ...] = ("videomae-b", "hiera-b")
    """Models of the video registry."""
    methods: tuple[str, ...] = ("full", "lora", "bitfit")
    """Methods searched."""
    base_precision: str = "bf16"
    """Precision of the learning-rate search."""
    precisions: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
    """Precisions of the ablation (pairs a method refuses are left out, with the reason)."""
    checkpointing_ablation: bool = True
    """Also run each method's best learning rate with activation checkpointing."""
    lrs: dict[str, tuple[float, ...]] = field(default_factory=lambda: dict(DEFAULT_LRS))
    """Learning rates searched, per method."""
    epochs: int = 3
    """Epochs of every search cell."""
    confirm_epochs: int = 10
    """Epochs of the confirmation runs."""
    confirm_seeds: tuple[int, ...] = (17, 18, 19)
    """Seeds of the confirmation runs."""
    seed: int = 17
    """Seed of the search cells."""
    dataset: str = "synthetic"
    """'synthetic' or a manifest CSV."""
    cache: str | None = None
    """Frame cache of the manifest."""
    root: str | None = None
    """Dataset root of the manifest."""
    batch_size: int = 4
    """Clips per training step."""
    tiny: bool = False
    """Few-layer models (CPU tests)."""
    frames: int | None = None
    """Frames per clip (model default)."""
    size: int | None = None
    """Frame side (model default)."""
    synthetic_clips: tuple[int, int, int] = (480, 120, 120)
    """Synthetic dataset: train, val, test clips."""
    max_steps_per_epoch: int | None = None
    """Cut every epoch (quick studies)."""
    num_workers: int | None = None
    """Data-loader workers per cell; None: `jouleprof run video`'s default."""
    deploy_sustained_s: float = 10.0
    """Seconds of each cell's sustained inference loop."""
    idle_s: float = 1.0
    """Idle baseline of each cell."""
    simulate_gpu_w: float | None = None
    """Testing aid: every cell measures a simulated GPU at this power."""
    cell_timeout_s: float = 1800.0
    """Kill a cell after this long."""
    reuse_deployment: bool = True
    """Measure the deployment cost once per model × method × precision: every later search or
    confirmation cell of that configuration takes the first one's (`jouleprof run video
    --deploy-from`; a cell measures its own where that one has none to give)."""

    def __post_init__(self) -> None:
        from jouleprof.workloads.video.adapt import METHODS, check_method
        from jouleprof.workloads.video.models import get_spec
        from jouleprof.workloads.video.precision import PRECISIONS

        if not self.models or not self.methods:
            raise ValueError("models and methods must each name at least one")
        for m in self.models:
            get_spec(m)
        for m in self.methods:
            check_method(m)
        for p in (self.base_precision, *self.precisions):
            if p not in PRECISIONS:
                raise ValueError(f"unknown precision {p!r}: choose one of {', '.join(PRECISIONS)}")
        lrs = {k: tuple(float(x) for x in v) for k, v in dict(self.lrs).items()}
        missing = [m for m in self.methods if not lrs.get(m)]
        if missing:
            raise ValueError(f"no learning rates for method(s) {missing} (methods: {METHODS})")
        object.__setattr__(self, "lrs", lrs)
        for name in ("epochs", "confirm_epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if not self.confirm_seeds:
            raise ValueError("confirm_seeds must name at least one seed")

    def to_json(self) -> dict[str, Any]:
        d = json.loads(json.dumps(asdict(self)))
        if not d["reuse_deployment"]:
            del d["reuse_deployment"]  # studies made before the setting resume with it off
        return d


EXTENDABLE = ("confirm_seeds",)
"""Settings a resumed study may lengthen: more confirmation seeds add confirmation cells and
change no other cell."""


def _lr_text(lr: float) -> str:
    return f"{lr:.0e}"


def _run_argv(cfg: VideoStudyConfig, **run: Any) -> tuple[str, ...]:
    """The `jouleprof run video` command of one cell."""
    args = [sys.executable, "-m", "jouleprof.cli.main", "run", "video"]
    opts: dict[str, Any] = {
        "dataset": cfg.dataset,
        "cache": cfg.cache,
        "root": cfg.root,
        "batch-size": cfg.batch_size,
        "frames": cfg.frames,
        "size": cfg.size,
        "synthetic-clips": ",".join(map(str, cfg.synthetic_clips)),
        "max-steps-per-epoch": cfg.max_steps_per_epoch,
        "num-workers": cfg.num_workers,
        "deploy-sustained-s": cfg.deploy_sustained_s,
        "idle-s": cfg.idle_s,
        "simulate-gpu-w": cfg.simulate_gpu_w,
    }
    opts.update({k.replace("_", "-"): v for k, v in run.items()})
    for k, v in opts.items():
        if v is None or v is False:
            continue
        if v is True:
            args.append(f"--{k}")
        else:
            args += [f"--{k}", str(v)]
    if cfg.tiny:
        args.append("--tiny")
    return (*args, "--out", "{cell_dir}")


DeploySources = dict[tuple[str, str, str], str]
"""Per (model, method, precision), the first cell that measures its deployment cost."""


def _cell(
    cfg: VideoStudyConfig, cell_id: str, stage: str, sources: DeploySources | None = None, **run
):
    """One cell; with `sources` (and `cfg.reuse_deployment`), a cell whose configuration an
    earlier cell measures takes that cell's deployment cost, and a first one is recorded."""
    from jouleprof.bench.matrix import Cell

    if sources is not None and cfg.reuse_deployment:
        key = (run["model"], run["method"], run["precision"])
        if key in sources:
            run["deploy_from"] = "{cell_dir}/../" + sources[key]
        else:
            sources[key] = cell_id

    factors = {
        "stage": stage,
        "model": run["model"],
        "method": run["method"],
        "precision": run["precision"],
        "checkpointing": bool(run.get("checkpointing")),
        "lr": run["lr"],
        "epochs": run["epochs"],
        "seed": run["seed"],
    }
    return Cell(cell_id, _run_argv(cfg, **run), factors, timeout_s=cfg.cell_timeout_s)


def smoke_cells(cfg: VideoStudyConfig) -> list:
    method = "lora" if "lora" in cfg.methods else cfg.methods[0]
    return [
        _cell(
            cfg,
            f"smoke-{m}",
            "smoke",
            model=m,
            method=method,
            precision=cfg.base_precision,
            lr=cfg.lrs[method][0],
            epochs=1,
            seed=cfg.seed,
            max_steps_per_epoch=2,
            deploy_sustained_s=min(cfg.deploy_sustained_s, 1.0),
        )
        for m in cfg.models
    ]


def lr_cells(cfg: VideoStudyConfig, sources: DeploySources | None = None) -> list:
    return [
        _cell(
            cfg,
            f"lr-{m}-{meth}-{_lr_text(lr)}",
            "search-lr",
            sources,
            model=m,
            method=meth,
            precision=cfg.base_precision,
            lr=lr,
            epochs=cfg.epochs,
            seed=cfg.seed,
        )
        # Each method's first rate before any second one, models innermost: a study cut short
        # by its budget has covered every method and model alike.
        for i in range(max(len(cfg.lrs[meth]) for meth in cfg.methods))
        for meth in cfg.methods
        if i < len(cfg.lrs[meth])
        for lr in (cfg.lrs[meth][i],)
        for m in cfg.models
    ]


def read_result(study_dir: Path, cell_id: str) -> dict[str, Any] | None:
    """A done cell's figures: val top-1 and loss, NS# and its interval; None if not done."""
    from jouleprof.bench.index import cell_status

    cdir = Path(study_dir) / "cells" / cell_id
    status, _ = cell_status(cdir)
    if status != "complete":
        return None
    d = json.loads((cdir / "run.json").read_text())
    video = (d.get("extra") or {}).get("video") or {}
    epochs = video.get("epochs") or []
    if not epochs:
        return None
    val = epochs[-1]["val"]
    ns = ((video.get("scores") or {}).get("deploy") or {}).get("ns_hash") or {}
    return {"top1": val.get("top1_pct"), "loss": val.get("loss"), "ns_hash": ns.get("value")}


def best_lr(study_dir: Path, cells: list) -> dict[tuple[str, str], float]:
    """Per (model, method), the learning rate of the best done cell (top-1, then lower loss)."""
    best: dict[tuple[str, str], tuple[tuple[float, float], float]] = {}
    for c in cells:
        r = read_result(study_dir, c.cell_id)
        if r is None or r["top1"] is None:
            continue
        key = (c.factors["model"], c.factors["method"])
        score = (r["top1"], -(r["loss"] if r["loss"] is not None else float("inf")))
        if key not in best or score > best[key][0]:
            best[key] = (score, c.factors["lr"])
    return {k: v[1] for k, v in best.items()}


def ablation_cells(
    cfg: VideoStudyConfig,
    lrs: dict[tuple[str, str], float],
    sources: DeploySources | None = None,
) -> tuple[list, list]:
    """Cells of the precision and checkpointing ablation, and the pairs left out (why)."""
    from jouleprof.workloads.video.precision import refusal

    cells, left_out = [], []
    variants = [(p, False) for p in cfg.precisions if p != cfg.base_precision]
    if cfg.checkpointing_ablation:
        variants.append((cfg.base_precision, True))
    # Models innermost, as in the learning-rate stage.
    order = sorted(lrs.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    for p, ck in variants:
        for (m, meth), lr in order:
            why = refusal(meth, p)
            if why:
                left_out.append({"model": m, "method": meth, "precision": p, "reason": why})
                continue
            cells.append(
                _cell(
                    cfg,
                    f"abl-{m}-{meth}-{p}-ck{int(ck)}",
                    "search-ablation",
                    sources,
                    model=m,
                    method=meth,
                    precision=p,
                    lr=lr,
                    epochs=cfg.epochs,
                    seed=cfg.seed,
                    checkpointing=ck,
                )
            )
    return cells, left_out


def best_by_ns(study_dir: Path, cells: list) -> dict[str, Any]:
    """Per model, the factors of the best done search cell by NS# (top-1 where NS# is None)."""
    best: dict[str, tuple[tuple, Any]] = {}
    for c in cells:
        r = read_result(study_dir, c.cell_id)
        if r is None or r["top1"] is None:
            continue
        key = (r["ns_hash"] is not None, r["ns_hash"] or 0.0, r["top1"])
        m = c.factors["model"]
        if m not in best or key > best[m][0]:
            best[m] = (key, c.factors)
    return {m: v[1] for m, v in best.items()}


def confirm_cells(
    cfg: VideoStudyConfig, winners: dict[str, Any], sources: DeploySources | None = None
) -> list:
    out = []
    # Seeds outer, models inner: a confirmation cut short by its budget has every model's
    # first seed before any second one.
    for seed in cfg.confirm_seeds:
        for m, f in sorted(winners.items()):
            ck = int(bool(f["checkpointing"]))
            out.append(
                _cell(
                    cfg,
                    f"confirm-{m}-{f['method']}-{f['precision']}-ck{ck}-s{seed}",
                    "confirm",
                    sources,
                    model=m,
                    method=f["method"],
                    precision=f["precision"],
                    lr=f["lr"],
                    epochs=cfg.confirm_epochs,
                    seed=seed,
                    checkpointing=bool(f["checkpointing"]),
                    test=True,
                )
            )
    return out


def run_video_study(
    cfg: VideoStudyConfig,
    out: str | Path,
    stages: tuple[str, ...] = STAGES,
    *,
    executor: Any = "local",
    retry_failed: bool = False,
    progress: bool = True,
    time_budget_s: float | None = None,
    budget_split: dict[str, float] | None = None,
    on_stage: Callable[[str, int], None] | None = None,
    preload: bool = True,
) -> dict[str, Any]:
    """Runs (or resumes) the asked stages into `out`; returns the plan (cells per stage).

    Args:
        stages: which of smoke, search, confirm (or the parts search-lr, search-ablation) to
            run now. Cells of a stage not asked that
            already have a directory stay in runs.csv (they are not run).
        time_budget_s: start no new cell after this long (a rerun resumes).
        budget_split: weights of the stages' parts (smoke, search-lr, search-ablation,
            confirm) in the budget; what a part leaves unspent goes to the next. None: one
            budget for all, spent in order.
        executor: "local", "slurm" or an Executor object.
        preload: with the "local" executor, fork every cell from one process that has imported
            torch, transformers and peft once (`bench.cellserver`): each cell is still its own
            process, without ~15 s of imports each (measured on the H200 host).
    """
    import time

    from jouleprof.bench.matrix import run_matrix

    bad = [s for s in stages if s not in STAGES and s not in PARTS]
    if bad or not stages:
        raise ValueError(
            f"unknown stage(s) {bad}: choose from {', '.join(STAGES)} (or a part: "
            f"{', '.join(p for p in PARTS if p not in STAGES)})"
        )
    out = Path(out)
    t0 = time.monotonic()
    spec = {"study": "video", **cfg.to_json()}
    if executor == "local":
        from jouleprof.bench.cellserver import VIDEO_PRELOAD
        from jouleprof.bench.executors import LocalExecutor

        executor = LocalExecutor(preload=VIDEO_PRELOAD if preload else None)
        try:
            return run_video_study(
                cfg,
                out,
                stages,
                executor=executor,
                retry_failed=retry_failed,
                progress=progress,
                time_budget_s=time_budget_s,
                budget_split=budget_split,
                on_stage=on_stage,
            )
        finally:
            executor.close()
    known: list = []
    plan: dict[str, Any] = {"stages": {}, "left_out": []}

    def asked(part: str) -> bool:
        return part in stages or PARTS[part] in stages

    parts = [p for p in PARTS if asked(p)]

    def budget(part: str) -> float | None:
        if time_budget_s is None or part == "smoke":
            return None  # every model's smoke cell runs: it is what tells a broken model early
        left = max(time_budget_s - (time.monotonic() - t0), 0.0)
        if not budget_split:
            return left
        rest = parts[parts.index(part) :]
        total = sum(budget_split.get(p, 0.0) for p in rest)
        return left * budget_split.get(part, 0.0) / total if total > 0 else left

    def keep_known(new: list) -> None:
        ids = {k.cell_id for k in known}
        known.extend(c for c in new if c.cell_id not in ids)

    def run(part: str, new: list) -> None:
        keep_known(new)
        now = {c.cell_id for c in new}

        def skip(cell, statuses):
            if cell.cell_id in now:
                return None
            return (
                "not-run",
                "not run in this call: its stage was not asked for, or the time budget ran out "
                "before it (rerun the study to resume)",
            )

        if on_stage:
            on_stage(part, len(new))
        res = run_matrix(
            out,
            spec,
            known,
            executor=executor,
            retry_failed=retry_failed,
            progress=progress,
            time_budget_s=budget(part),
            skip=skip,
            extendable=EXTENDABLE,
        )
        plan["stages"][part] = {
            "cells": sorted(now),
            "done": [c for c in res.done if c in now],
            "failed": [c for c in res.failed if c in now],
            "skipped": [c for c in res.skipped if c in now],
        }

    def existing(cells: list) -> list:
        return [c for c in cells if (out / "cells" / c.cell_id).is_dir()]

    sources: DeploySources = {}  # filled in cell order: search-lr, ablation, confirmation
    smoke = smoke_cells(cfg)
    if asked("smoke"):
        run("smoke", smoke)
    else:
        keep_known(existing(smoke))
    a = lr_cells(cfg, sources)
    if asked("search-lr"):
        run("search-lr", a)
    else:
        keep_known(existing(a))
    b, left_out = ablation_cells(cfg, best_lr(out, a), sources)
    plan["left_out"] = left_out
    if asked("search-ablation"):
        run("search-ablation", b)
    else:
        keep_known(existing(b))
    if asked("confirm"):
        winners = best_by_ns(out, a + b)
        plan["winners"] = winners
        run("confirm", confirm_cells(cfg, winners, sources))
    (out / "plan.json").write_text(json.dumps(plan, indent=1, default=str) + "\n")
    return plan
