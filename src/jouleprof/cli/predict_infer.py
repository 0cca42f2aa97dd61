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
            "--per-layer",
            help="Show every layer's share of the pass: bound, time and energy (the rows add up "
            "to the totals).",
        ),
    ] = False,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            help="With --per-layer: also GFLOP, MB, launches and roofline time, at the table's "
            "full width whatever the terminal's (--json has every field).",
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
        title = f"{model} batch {batch} {precision} on {pred.gpu}"
        table = layer_table(pred, title, wide)
        if wide:
            from rich.console import Console
            from rich.measure import Measurement

            opts = out_console.options.update_width(100_000)
            w = Measurement.get(out_console, opts, table).maximum
            con = out_console if w <= out_console.width else Console(width=w, highlight=False)
            con.print(table)
        else:
            out_console.print(table)
    from rich.markup import escape

    out_console.print(
        escape(
            f"{model}  batch {batch}  {precision}  on {pred.gpu}  [{pred.predictor}]\n"
            f"  predicted  {pred.j_per_sample:.4g} J/sample  "
            f"[{pred.j_per_sample_lo:.4g}, {pred.j_per_sample_hi:.4g}]   "
            f"{pred.s_per_batch * 1e3:.4g} ms/batch"
        )
    )


def layer_table(pred, title: str, wide: bool = False):
    """The per-layer table of `pred`: each layer's share of the pass's time (ms per batch) and
    energy (mJ per sample), with a total row equal to the prediction's. Module and type names
    wrap rather than being cut; the numeric columns are never narrowed below their figures."""
    from rich import box
    from rich.table import Table

    b = pred.batch
    e_pass = sum(lp.energy_j for lp in pred.layers)
    t_pass = sum(lp.time_s for lp in pred.layers)
    # units that keep the totals >= 1, so 4 decimals resolve the small layers
    e_unit, e_mul = next((u, m) for u, m in (("mJ", 1e3), ("µJ", 1e6), ("nJ", 1e9))
                         if e_pass / b * m >= 1 or u == "nJ")  # fmt: skip
    t_unit, t_mul = ("ms", 1e3) if t_pass >= 1e-3 else ("µs", 1e6)
    t_col, e_col = f"{t_unit}/batch", f"{e_unit}/sample"
    cols = ["module", "type"]
    if wide:
        cols += ["GFLOP", "MB", "launches"]
    cols += ["bound"] + (["roofline ms"] if wide else []) + [t_col, e_col, "% E"]
    rows = []
    for lp in pred.layers:
        cells = {"module": lp.module or "(root)", "type": lp.module_type, "bound": lp.bound,
                 "GFLOP": f"{lp.flops / 1e9:.3f}", "MB": f"{lp.bytes / 1e6:.2f}",
                 "launches": str(lp.launches), "roofline ms": f"{lp.roofline_s * 1e3:.4f}",
                 t_col: f"{lp.time_s * t_mul:.4f}", e_col: f"{lp.energy_j / b * e_mul:.4f}",
                 "% E": f"{100 * lp.energy_j / e_pass:.1f}" if e_pass else "-"}  # fmt: skip
        rows.append([cells[c] for c in cols])
    foot = {c: "" for c in cols}
    foot.update({"module": "total", "launches": str(sum(lp.launches for lp in pred.layers)),
                 t_col: f"{t_pass * t_mul:.4f}", e_col: f"{e_pass / b * e_mul:.4f}",
                 "% E": "100.0" if e_pass else "-"})  # fmt: skip
    t = Table(
        title=title,
        caption=f"{t_col}: the layer's share of a pass of {b} (launch gaps included); "
        f"{e_col}: its share of the energy per sample (its own FLOPs and bytes, and the base "
        "power over its time). The rows add up to the total.",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        show_edge=False,
        show_footer=True,
    )
    for i, c in enumerate(cols):
        if c in ("module", "type"):
            t.add_column(c, footer=foot[c], overflow="fold")
        else:
            width = max(len(c), len(foot[c]), *(len(r[i]) for r in rows)) if rows else len(c)
            t.add_column(c, footer=foot[c], justify="left" if c == "bound" else "right",
                         no_wrap=True, min_width=width)  # fmt: skip
    for r in rows:
        t.add_row(*r)
    return t


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
