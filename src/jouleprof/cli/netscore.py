"""`jouleprof netscore`: NetScore and its deployment variants from figures you give."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jouleprof.cli.console import fail, out_console


def netscore_cmd(
    accuracy: Annotated[float, typer.Option(help="Top-1 accuracy in percent (0, 100].")],
    params_m: Annotated[float | None, typer.Option(help="Parameters, millions.")] = None,
    macs_g: Annotated[float | None, typer.Option(help="Multiply-accumulates, billions.")] = None,
    time_s: Annotated[float | None, typer.Option(help="Timed inference, seconds.")] = None,
    power_w: Annotated[float | None, typer.Option(help="Average power, watts.")] = None,
    memory_mib: Annotated[float | None, typer.Option(help="Peak memory, MiB.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """NetScore (Wong 2019) and NS_E, NS_M, NS# for whichever inputs are given."""
    from jouleprof.scores.netscore import NetScoreInputs, scores

    try:
        result = scores(NetScoreInputs(accuracy, params_m, macs_g, time_s, power_w, memory_mib))
    except ValueError as e:
        fail(str(e))
    if json_out:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            out_console.print(f"{k:9s} {v:8.3f}")


def register(app: typer.Typer) -> None:
    app.command("netscore")(netscore_cmd)
