"""`jouleprof predict ...`: what a run will cost before it is run.

`predict` is a command group; each predictor registers its commands from its own module, listed
in `_PREDICT_MODULES`, through a `register_predict(predict_app)` function (`infer` and `evaluate`
for inference, `train` for training).
"""

from __future__ import annotations

import importlib

import typer

predict_app = typer.Typer(
    help="Predict energy, time and memory before running (no GPU needed).",
    no_args_is_help=True,
)

_PREDICT_MODULES = ("predict_infer", "predict_train")


def register(app: typer.Typer) -> None:
    found = False
    for name in _PREDICT_MODULES:
        try:
            mod = importlib.import_module(f"jouleprof.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"jouleprof.cli.{name}":
                raise
            continue
        mod.register_predict(predict_app)
        found = True
    if found:
        app.add_typer(predict_app, name="predict")
