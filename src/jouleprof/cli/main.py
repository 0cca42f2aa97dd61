"""Entry point of the `jouleprof` command.

Each subcommand lives in its own module and imports what it needs only when it runs, so
`jouleprof --help` imports neither torch nor pynvml.
"""

from __future__ import annotations

import logging
import sys

import typer
import typer.core

from jouleprof.cli import measure, netscore, sensors
from jouleprof.errors import JouleprofError

# Plain click help and errors: they wrap at the terminal's width and never cut an option's
# name or help (typer's rich panels did, at 80 columns), and they print no box-drawing frames.
typer.core.HAS_RICH = False

app = typer.Typer(
    name="jouleprof",
    help="Measure, attribute and predict the GPU energy, time and memory of deep learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from jouleprof import __version__

        print(f"jouleprof {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        help="Print jouleprof's version and exit.",
        callback=_version,
        is_eager=True,
    ),
) -> None:
    """Measure, attribute and predict the GPU energy, time and memory of deep learning."""


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
        "compare",
        "collect",
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
    import os

    from jouleprof.cli.console import error
    from jouleprof.interrupts import terminate_as_interrupt

    terminate_as_interrupt()  # SIGTERM (timeout, kill, scancel) takes Ctrl-C's path
    try:
        app(args=argv, prog_name="jouleprof")
    except JouleprofError as e:
        error(str(e))
        sys.exit(2)
    except ValueError as e:  # configs name the bad field and its valid values
        if os.environ.get("JOULEPROF_DEBUG"):
            raise
        error(str(e))
        sys.exit(2)
    except Exception as e:  # a user never gets a traceback; a developer asks for one
        if os.environ.get("JOULEPROF_DEBUG"):
            raise
        from jouleprof.extras import advice

        how = advice(e.name or "") if isinstance(e, ModuleNotFoundError) else None
        if how is not None:  # an optional package this command needs
            error(f"this command needs {e.name}, which is not installed: {how}")
            sys.exit(2)
        error(
            f"unexpected {type(e).__name__}: {e} (a bug in jouleprof: please report it with "
            "the command; JOULEPROF_DEBUG=1 shows the traceback)"
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
