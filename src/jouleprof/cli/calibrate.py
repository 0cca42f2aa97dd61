"""`jouleprof calibrate`: measure this GPU's ceilings into a GPU file for `predict infer --gpu`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, note, out_console


def calibrate_cmd(
    out: Annotated[Path, typer.Option(help="GPU file to write (JSON).")] = Path("gpu.json"),
    seconds: Annotated[float, typer.Option(help="Seconds per ceiling loop (>= 0.2).")] = 2.0,
    gpu: Annotated[int, typer.Option(help="GPU index (as under CUDA_VISIBLE_DEVICES).")] = 0,
    run_dir: Annotated[
        Path | None, typer.Option(help="Keep the measurement's run directory here.")
    ] = None,
) -> None:
    """Measure matmul throughput per precision, copy bandwidth, launch overhead and idle /
    full-load power (about a minute), and write them as a GPU file."""
    if seconds < 0.2:
        raise typer.BadParameter("must be >= 0.2", param_hint="--seconds")
    try:
        import torch
    except ImportError:
        fail("calibrate needs torch with CUDA: pip install 'jouleprof[torch]'")
    if not torch.cuda.is_available():
        fail("calibrate measures a GPU, and torch sees no CUDA GPU here; "
             "predict for a shipped GPU instead (--gpu h200)")  # fmt: skip
    import tempfile

    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.predict.calibrate import gpu_file, measure_ceilings, write_gpu_file
    from jouleprof.timeline.windows import signal_grids, window_energies
    from jouleprof.types import Span

    torch.cuda.set_device(gpu)
    where = run_dir or Path(tempfile.mkdtemp(prefix="jouleprof-calibrate-")) / "run"
    cfg = MeasureConfig(gpus=(gpu,), interval_s=0.02, counter_interval_s=0.1, idle_s=3.0,
                        kind="calibrate")  # fmt: skip
    marks: list[tuple[str, float, float]] = []
    with measure(where, cfg) as m:
        spans = m.span_writer()

        def mark(name: str, t0: float, t1: float) -> None:
            marks.append((name, t0, t1))
            spans.write([Span(len(marks), name, t0, t1)])

        ceil = measure_ceilings(f"cuda:{gpu}", seconds, mark, m.clock.now_s)
    samples = m.run_dir.read_samples()
    dev = f"gpu{gpu}"
    grids = signal_grids(samples, dev)
    power: dict[str, float | None] = {}
    for name, t0, t1 in marks:
        w = window_energies(samples, dev, t0, t1, grids=grids)["counter"]
        power[f"{name}_w"] = w.mean_power_w
    work = m.work
    if work is not None:
        w = window_energies(samples, dev, work.t0_s - cfg.idle_s + 0.2, work.t0_s, grids=grids)
        power["idle_w"] = w["counter"].mean_power_w or w["power_avg"].mean_power_w
    gpus = m.record.hardware.get("gpus")
    limit = gpus[0].get("power_limit_w") if isinstance(gpus, list) and gpus else None
    power["power_limit_w"] = float(limit) if isinstance(limit, int | float) else None
    data = gpu_file(ceil, power, f"measured by jouleprof calibrate ({seconds:g} s per loop)")
    write_gpu_file(data, out)
    for k in ("idle_w", "full_load_w"):
        if data.get(k) is None:
            note(f"{k} could not be measured (no energy counter reading): left empty")
    mm = data["matmul_flops_s"]
    out_console.print(
        f"{data['name']}: matmul bf16 {mm['bf16'] / 1e12:.0f}, fp16 {mm['fp16'] / 1e12:.0f}, "
        f"tf32 {mm['tf32'] / 1e12:.0f}, fp32 {mm['fp32'] / 1e12:.0f} TFLOP/s; copy "
        f"{data['mem_bytes_s'] / 1e12:.2f} TB/s; launch {data['launch_s'] * 1e6:.1f} us\n"
        f"wrote {out} (predictions with it are marked unvalidated: the predictor was trained on "
        "the H200)"
    )


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
