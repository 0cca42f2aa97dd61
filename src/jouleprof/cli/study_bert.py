"""`jouleprof study bert`: a sweep of BERT masked-LM configurations, each cell its own process.

Every cell runs `python -m jouleprof.workloads.bert_protocol` (through torchrun when it needs
several GPUs) into its own run directory via jouleprof.bench.matrix; rerunning the same command
resumes. `--design axes` varies one axis at a time around the first value of every list (the
cheap design that teaches the scaling law each axis' slope); `--design grid` runs every
combination.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from jouleprof.cli.console import fail, note

AXES = ("layers", "hidden", "heads", "seq", "batch")


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not out or any(v < 1 for v in out):
        raise typer.BadParameter(f"{flag} needs integers ≥ 1, got {text!r}")
    return out


def design_points(values: dict[str, tuple[int, ...]], design: str) -> list[dict[str, int]]:
    """The configurations of a design (axes: a hidden size the base heads do not divide gets
    hidden/64 heads, BERT's head size)."""
    if design == "grid":
        pts = [
            dict(zip(AXES, combo, strict=True))
            for combo in itertools.product(*(values[a] for a in AXES))
        ]
    elif design == "axes":
        base = {a: values[a][0] for a in AXES}
        pts = [dict(base)]
        for a in AXES:
            for v in values[a][1:]:
                pt = {**base, a: v}
                if a == "hidden":  # BERT's head size of 64 where the base heads do not divide
                    pt["heads"] = base["heads"] if v % base["heads"] == 0 else max(1, v // 64)
                pts.append(pt)
    else:
        raise typer.BadParameter(f"--design must be axes or grid, got {design!r}")
    out, seen = [], set()
    for p in pts:
        key = tuple(p[a] for a in AXES)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def build_cells(
    points, *, strategy: str, gpus: int, precision: str, measure_s: float, timeout_s: float
) -> list[Any]:
    """One matrix Cell per configuration; a bad configuration fails here, before any run."""
    from jouleprof.bench.matrix import Cell
    from jouleprof.workloads.bert import BertTrainConfig

    cells = []
    for p in points:
        cfg = BertTrainConfig(**p, strategy=strategy, precision=precision, min_measure_s=measure_s)
        if strategy == "tp" and (cfg.hidden % gpus or cfg.heads % gpus):
            raise ValueError(
                f"{cfg.shape_key}: tensor parallelism over {gpus} GPUs needs "
                f"hidden and heads divisible by {gpus}"
            )
        argv = [sys.executable, "-m", "jouleprof.workloads.bert_protocol"]
        for k, v in cfg.to_json().items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        argv += ["--out", "{cell_dir}"]
        cid = cfg.shape_key + ("" if strategy == "none" else f"-{strategy}{gpus}")
        cells.append(
            Cell(
                cid,
                tuple(argv),
                factors={**p, "strategy": strategy, "gpus": gpus, "precision": precision},
                timeout_s=timeout_s,
                gpus=gpus,
            )
        )
    return cells


def study_bert_cmd(
    layers: Annotated[str, typer.Option(help="Comma-separated layer counts L.")] = "12,2,6,24",
    hidden: Annotated[
        str, typer.Option(help="Comma-separated hidden sizes H.")
    ] = "768,256,512,1024",
    heads: Annotated[str, typer.Option(help="Comma-separated head counts A.")] = "12,4,8",
    seq: Annotated[
        str, typer.Option(help="Comma-separated sequence lengths S.")
    ] = "128,64,256,512",
    batch: Annotated[
        str, typer.Option(help="Comma-separated per-GPU batch sizes B.")
    ] = "32,8,16,64,128",
    design: Annotated[
        str, typer.Option(help="axes (one at a time around the first values) or grid.")
    ] = "axes",
    strategy: Annotated[str, typer.Option(help="none, ddp, fsdp or tp.")] = "none",
    gpus: Annotated[int, typer.Option(help="GPUs per cell (> 1: torchrun).")] = 1,
    precision: Annotated[str, typer.Option(help="bf16 or fp32.")] = "bf16",
    measure_s: Annotated[float, typer.Option(help="Measured seconds per cell.")] = 6.0,
    executor: Annotated[str, typer.Option(help="local or slurm.")] = "local",
    cell_timeout_s: Annotated[float, typer.Option(help="Kill a cell after this long.")] = 600.0,
    time_budget_s: Annotated[
        float | None, typer.Option(help="Start no new cell after this long.")
    ] = None,
    retry_failed: Annotated[bool, typer.Option(help="Rerun cells recorded as failed.")] = False,
    dry_run: Annotated[bool, typer.Option(help="List the cells and stop.")] = False,
    out: Annotated[Path, typer.Option(help="Study directory (rerun to resume).")] = Path(
        "jouleprof-runs/study-bert"
    ),
) -> None:
    """BERT masked-LM: layers × hidden × heads × seq × batch, one measured process per cell."""
    values = {
        "layers": _ints(layers, "--layers"),
        "hidden": _ints(hidden, "--hidden"),
        "heads": _ints(heads, "--heads"),
        "seq": _ints(seq, "--seq"),
        "batch": _ints(batch, "--batch"),
    }
    if gpus < 1:
        raise typer.BadParameter(f"--gpus must be ≥ 1, got {gpus}")
    if gpus > 1 and strategy == "none":
        fail("--gpus > 1 needs --strategy ddp, fsdp or tp")
    points = design_points(values, design)
    # a head count that does not divide H is dropped from that point with a note, not run
    keep = [p for p in points if p["hidden"] % p["heads"] == 0]
    for p in points:
        if p not in keep:
            note(f"skipping H{p['hidden']} A{p['heads']}: hidden is not divisible by heads")
    try:
        cells = build_cells(
            keep,
            strategy=strategy,
            gpus=gpus,
            precision=precision,
            measure_s=measure_s,
            timeout_s=cell_timeout_s,
        )
    except ValueError as e:
        fail(str(e))
    if not cells:
        fail("no configuration left to run: check --hidden and --heads")
    if dry_run:
        for c in cells:
            typer.echo(c.cell_id)
        return
    from jouleprof.extras import require

    if executor == "local":  # a Slurm job's node brings its own packages
        require("jouleprof study bert", "torch", "transformers", extra="train")
    from jouleprof.bench.matrix import run_matrix

    spec = {
        "study": "bert",
        "design": design,
        **{k: list(v) for k, v in values.items()},
        "strategy": strategy,
        "gpus": gpus,
        "precision": precision,
        "measure_s": measure_s,
    }
    try:
        res = run_matrix(
            out,
            spec,
            cells,
            executor=executor,
            retry_failed=retry_failed,
            time_budget_s=time_budget_s,
        )
    except ValueError as e:
        fail(str(e))
    note(
        f"{len(res.done)} done, {len(res.failed)} failed, {len(res.skipped)} skipped; "
        f"index: {res.index_path}"
    )


def register_study(study_app: typer.Typer) -> None:
    study_app.command("bert")(study_bert_cmd)
