"""`jouleprof infer --model NAME`: the deployment cost of a model (latency, energy, memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import (
    err_console,
    fail,
    note,
    note_if_no_cuda,
    refuse_file_out,
    working,
)


def _fmt(v, unit: str, digits: int = 4) -> str:
    return "unavailable" if v is None else f"{v:,.{digits}g} {unit}"


def infer_cmd(
    model: Annotated[
        str,
        typer.Option(
            help="videomae-b, timesformer-b, swin3d-b, hiera-b, or timm:NAME, torchvision:NAME, "
            "hf:NAME, path.py:factory."
        ),
    ],
    weights: Annotated[
        str | None, typer.Option(help="Local path or hub id (video models; default random init).")
    ] = None,
    batch: Annotated[int, typer.Option(help="Clips (samples) per pass.", min=1)] = 1,
    precision: Annotated[str, typer.Option(help="fp32, fp16, bf16 (autocast) or int8.")] = "bf16",
    protocol: Annotated[
        str,
        typer.Option(
            help="clip: warm-up, synchronized passes for latency, then a ≥ 10 s sustained loop "
            "for energy; steady: 3 warm-ups, synchronized passes for ≥ 6 s give both (what "
            "`jouleprof predict infer` predicts)."
        ),
    ] = "clip",
    warmup: Annotated[int, typer.Option(help="Warm-up passes (clip protocol).", min=0)] = 5,
    passes: Annotated[int, typer.Option(help="Synchronized latency passes (clip).", min=1)] = 30,
    sustained_s: Annotated[
        float | None, typer.Option(help="Seconds of the energy loop (default 10 clip, 6 steady).")
    ] = None,
    num_classes: Annotated[int, typer.Option(help="Classes of a video model's head.", min=1)] = 20,
    tiny: Annotated[
        bool, typer.Option(help="A video model's tiny config (CPU smoke test).")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Run directory to create.")] = None,
) -> None:
    """Measure a model's inference: latency (mean/p50/p95), energy per clip, peak memory."""
    from jouleprof.extras import require

    require("jouleprof infer", "torch")
    from jouleprof.bench.infer import InferConfig, run_infer
    from jouleprof.errors import JouleprofError
    from jouleprof.measurement import DEFAULT_RUNS_DIR
    from jouleprof.store.rundir import new_run_id

    try:
        cfg = InferConfig(
            model=model,
            weights=weights,
            batch=batch,
            precision=precision,
            protocol=protocol,
            warmup=warmup,
            passes=passes,
            sustained_s=sustained_s,
            num_classes=num_classes,
            tiny=tiny,
        )
    except ValueError as e:
        fail(str(e))
    path = out or Path(DEFAULT_RUNS_DIR) / new_run_id("infer")
    refuse_file_out(path)
    note_if_no_cuda(
        "inference",
        "latency only (no GPU energy); a full-size video model takes seconds a pass here",
        "--tiny for a smoke test",
    )
    try:
        with working(f"measuring {model} inference…") as w:
            r = run_infer(cfg, path, on_stage=lambda s: w.update(f"{model}: {s}"))
    except (JouleprofError, ValueError) as e:
        fail(str(e))
    except KeyboardInterrupt:
        note(f"interrupted: {path} holds everything recorded until then")
        raise typer.Exit(130) from None
    from rich.table import Table

    t = Table(title=f"{model} · batch {batch} · {precision} · protocol {protocol}")
    t.add_column("figure")
    t.add_column("value")
    t.add_row("latency mean", _fmt(r["latency_s_mean"] * 1e3, "ms"))
    t.add_row(
        "latency p50 / p95", f"{r['latency_s_p50'] * 1e3:,.4g} / {r['latency_s_p95'] * 1e3:,.4g} ms"
    )
    unit = "J/clip" if protocol == "clip" else "J/sample"
    if r.get("j_per_clip") is not None:
        t.add_row(
            f"energy ({unit})",
            f"{r['j_per_clip']:,.4g} [{r['j_per_clip_lo']:,.4g} … "
            f"{r['j_per_clip_hi']:,.4g}] (measured)",
        )
        t.add_row("mean power", _fmt(r["power_w"], "W"))
    else:
        why = str(r["energy_note"]).removeprefix("unavailable: ")
        t.add_row(f"energy ({unit})", f"unavailable ({escape(why)})")
    t.add_row("energy window", f"{r['window_s']:.2f} s, {r['window_passes']} passes")
    t.add_row(
        "peak allocated memory",
        _fmt(r["peak_mem_mib"], "MiB")
        if r["peak_mem_mib"] is not None
        else "unavailable (no CUDA device)",
    )
    err_console.print(t)
    note(f"run directory: {path} (run.json extra.inference)")


def register(app: typer.Typer) -> None:
    app.command("infer")(infer_cmd)
