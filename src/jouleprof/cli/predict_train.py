"""`jouleprof predict train`: joules and seconds per training step from the fitted scaling law.

Needs no GPU: the proxies are analytic counts of the configuration, the constants were fitted
on a measured sweep (predict.train_laws); several GPUs go through predict.train_multi.
`predict evaluate --train` (cli/predict_infer.py) calls predict.train_evaluate.evaluate.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import fail, flags_named

STRATEGIES = ("none", "ddp", "fsdp", "tp")


def train_cmd(
    workload: Annotated[str, typer.Option(help="Workload with a fitted law: bert.")] = "bert",
    layers: Annotated[int, typer.Option(help="Encoder layers L.")] = 12,
    hidden: Annotated[int, typer.Option(help="Hidden size H (intermediate 4H).")] = 768,
    heads: Annotated[int, typer.Option(help="Attention heads A (H divisible by A).")] = 12,
    seq: Annotated[int, typer.Option(help="Sequence length S.")] = 128,
    batch: Annotated[int, typer.Option(help="Sequences per GPU per step B.")] = 32,
    gpus: Annotated[int, typer.Option(help="GPUs (> 1 needs a strategy).")] = 1,
    strategy: Annotated[str, typer.Option(help="none, ddp, fsdp or tp.")] = "none",
    precision: Annotated[str, typer.Option(help="bf16 (the fitted precision).")] = "bf16",
    gpu: Annotated[str, typer.Option(help="GPU model with a fitted law: h200.")] = "h200",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Predict joules per step and per sample, and seconds per step, with an interval."""
    from jouleprof.predict.train_laws import get_law
    from jouleprof.predict.train_multi import predict_config
    from jouleprof.workloads.bert import BertTrainConfig

    if strategy not in STRATEGIES:
        raise typer.BadParameter(
            f"--strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    if gpus < 1:
        raise typer.BadParameter(f"--gpus must be ≥ 1, got {gpus}")
    try:
        cfg = BertTrainConfig(
            layers=layers,
            hidden=hidden,
            heads=heads,
            seq=seq,
            batch=batch,
            strategy=strategy,
            precision=precision,
        )
        law = get_law(workload, gpu, precision)
        res = predict_config(law, cfg, gpus=gpus, strategy=strategy, gpu=gpu)
    except ValueError as e:
        fail(flags_named(str(e), train_cmd))  # BertTrainConfig names its fields (batch)
    res.update(
        workload=workload,
        gpu=gpu,
        precision=precision,
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq=seq,
        batch=batch,
    )
    if json_out:
        typer.echo(json.dumps(res, indent=2))
        return
    from rich.console import Console

    c = Console()
    c.print(
        f"[bold]{workload}[/] L{layers} H{hidden} A{heads} S{seq} B{batch} on {gpus}× {gpu} "
        f"({strategy}, {precision}) — predicted"
    )
    c.print(
        f"  joules per step   {res['j_per_step']:.2f} J  "
        f"[{res['j_per_step_lo']:.2f}, {res['j_per_step_hi']:.2f}]"
    )
    c.print(f"  joules per sample {res['j_per_sample']:.4f} J")
    c.print(
        f"  seconds per step  {res['s_per_step']:.4f} s  "
        f"[{res['s_per_step_lo']:.4f}, {res['s_per_step_hi']:.4f}]"
    )
    if res["eta"] is not None:
        c.print(f"  efficiency η      {res['eta']:.2f} (speedup over ideal, unfitted)")
    for n in res["notes"]:
        c.print(f"  [yellow]note:[/] {escape(str(n))}")


def register_predict(predict_app: typer.Typer) -> None:
    predict_app.command("train")(train_cmd)
