"""`jouleprof predict infer` and `jouleprof predict evaluate`: inference energy before running."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jouleprof.cli.console import fail, note, out_console

DATASET_FOLDER = "predict_dataset"  # under benchmarks/results/ of the repository
PRECISIONS = ("bf16", "fp16", "fp32")


def infer_cmd(
    model: Annotated[
        str, typer.Option(help="timm:NAME, torchvision:NAME, hf:NAME or path/to/module.py:factory")
    ],
    batch: Annotated[int, typer.Option(help="Batch size (>= 1).")] = 1,
    precision: Annotated[
        str, typer.Option(help="bf16, fp16 or fp32 (autocast; none for fp32).")
    ] = "bf16",
    gpu: Annotated[
        str, typer.Option(help="A shipped GPU name (h200) or a file from `jouleprof calibrate`.")
    ] = "h200",
    per_layer: Annotated[
        bool,
        typer.Option(
            "--per-layer", help="Show every layer's FLOPs, bytes, bound, time and energy."
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Predict J/sample and s/batch of one inference pass (no GPU, no weights needed)."""  # noqa: E501
    if precision not in PRECISIONS:
        raise typer.BadParameter(
            f"must be one of {', '.join(PRECISIONS)}", param_hint="--precision"
        )
    if batch < 1:
        raise typer.BadParameter("must be >= 1", param_hint="--batch")
    from jouleprof.predict.shipped import predict_inference

    try:
        pred = predict_inference(model, batch, precision, gpu)
    except ValueError as e:
        fail(str(e))
    if json_out:
        print(json.dumps(pred.to_dict(per_layer=True)))
        return
    if not pred.calibrated:
        note("UNCALIBRATED: no trained predictor ships; this is a roofline estimate")
    for n in pred.notes:
        note(n)
    if pred.unsupported:
        note("operators without a FLOP formula, counted as 0 FLOPs: "
             + ", ".join(f"{k} x{v}" for k, v in sorted(pred.unsupported.items())))  # fmt: skip
    if per_layer:
        from rich.table import Table

        t = Table(title=f"{model} batch {batch} {precision} on {pred.gpu}")
        for c in ("module", "type", "GFLOP", "MB", "launches", "bound", "roofline ms", "ms", "J"):
            t.add_column(c, justify="left" if c in ("module", "type", "bound") else "right")
        for lp in pred.layers:
            t.add_row(lp.module or "(root)", lp.module_type, f"{lp.flops / 1e9:.3f}",
                      f"{lp.bytes / 1e6:.2f}", str(lp.launches), lp.bound,
                      f"{lp.roofline_s * 1e3:.4f}", f"{lp.time_s * 1e3:.4f}",
                      f"{lp.energy_j:.4f}")  # fmt: skip
        out_console.print(t)
    from rich.markup import escape

    out_console.print(
        escape(
            f"{model}  batch {batch}  {precision}  on {pred.gpu}  [{pred.predictor}]\n"
            f"  predicted  {pred.j_per_sample:.4g} J/sample  "
            f"[{pred.j_per_sample_lo:.4g}, {pred.j_per_sample_hi:.4g}]   "
            f"{pred.s_per_batch * 1e3:.4g} ms/batch"
        )
    )


def evaluate_cmd(
    data: Annotated[
        Path | None,
        typer.Option(
            help="Dataset directory (models_energy.csv, layers.csv, ops.parquet); default: the "
            "repository's benchmarks/results/predict_dataset. With --train: a BERT sweep "
            "(a `jouleprof study bert` folder, or results.csv's folder); default: "
            "benchmarks/results/bert_sweep."
        ),
    ] = None,
    gpu: Annotated[str, typer.Option(help="GPU file the dataset was measured on.")] = "h200",
    train: Annotated[
        bool, typer.Option("--train", help="Evaluate the training-energy predictor instead.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Leave-family-out accuracy of the inference predictor and its baselines (from the dataset)."""  # noqa: E501
    if train:
        _evaluate_train(data, gpu, json_out)
        return
    from jouleprof.predict.dataset import load_dataset
    from jouleprof.predict.evaluate import leave_family_out, metrics_table
    from jouleprof.predict.roofline import load_gpu

    if data is None:
        from jouleprof.predict.committed import committed_results

        data = committed_results(DATASET_FOLDER, "models_energy.csv")
        if data is None:
            fail(
                f"no committed dataset found (benchmarks/results/{DATASET_FOLDER}/"
                "models_energy.csv): run from a clone of the repository or pass --data DIR"
            )
    try:
        ds = load_dataset(data)
        g = load_gpu(gpu)
    except ValueError as e:
        fail(str(e))
    from rich.progress import Progress

    with Progress(transient=True, console=out_console) as prog:
        task = prog.add_task("leave-family-out", total=len(set(ds.models["family"])))

        def step(fam: str) -> None:
            prog.update(task, advance=1, description=f"holding out {fam}")

        preds = leave_family_out(ds, g, progress=step)
    table = metrics_table(preds)
    if json_out:
        print(table.to_json(orient="records"))
        return
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))  # no line wrapping


def register_predict(predict_app: typer.Typer) -> None:
    predict_app.command("infer")(infer_cmd)
    predict_app.command("evaluate")(evaluate_cmd)


def _evaluate_train(data: Path | None, gpu: str, json_out: bool) -> None:
    """`predict evaluate --train`: the training-energy law's accuracy table from a BERT sweep
    (`data`, else the committed one), with `gpu`'s ceilings."""
    from jouleprof.predict.train_evaluate import default_sweep_dir, evaluate, sweep_table
    from jouleprof.predict.train_laws import ceilings

    try:
        sweep = Path(data) if data is not None else default_sweep_dir()
        sweep_table(sweep)
        ceilings(gpu)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    except KeyError as e:
        fail(f"GPU file {gpu!r} lacks {e}: give one from `jouleprof calibrate --out FILE.json`")
    try:
        evaluate(json_out, sweep_dir=sweep, gpu=gpu)
    except (KeyError, ValueError) as e:
        fail(f"cannot evaluate the sweep in {sweep}: {e}")
