"""Entry point of the `jouleprof` command.

Each subcommand lives in its own module and imports what it needs only when it runs, so
`jouleprof --help` imports neither torch nor pynvml.
"""

from __future__ import annotations

import logging
import sys

import typer

from jouleprof.cli import measure, netscore, sensors
from jouleprof.errors import JouleprofError

app = typer.Typer(
    name="jouleprof",
    help="Measure, attribute and predict the GPU energy, time and memory of deep learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (measure, sensors, netscore):
    module.register(app)


def _register_optional() -> None:
    # Subcommands added by later parts of the tool register themselves the same way.
    import importlib

    for name in (
        "attribute",
        "study",
        "report",
        "profile",
        "predict",
        "data",
        "run",
        "summarize",
        "analyze",
        "calibrate",
        "probe",
        "infer",
    ):
        try:
            mod = importlib.import_module(f"jouleprof.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"jouleprof.cli.{name}":
                raise
            continue
        mod.register(app)


_register_optional()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app(args=argv, prog_name="jouleprof")
    except JouleprofError as e:
        from jouleprof.cli.console import error

        error(str(e))
        sys.exit(2)


if __name__ == "__main__":
    main()
