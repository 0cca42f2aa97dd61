"""Terminal output shared by the subcommands (rich, to stderr for messages)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape

from jouleprof.types import Figure

err_console = Console(stderr=True, soft_wrap=True)  # messages stay whole lines (grep-able)
out_console = Console()


def error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def note(message: str) -> None:
    err_console.print(f"[dim]{escape(message)}[/]", highlight=False)


def fail(message: str, code: int = 2) -> None:
    """Print an error for the user and exit with `code`."""
    import typer

    error(message)
    raise typer.Exit(code)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 figure", "3 figures": `n` and the noun in its number (`plural` where not noun + s)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def cli_flags(command: Callable[..., Any]) -> dict[str, str]:
    """{parameter name: its flag} of a typer command function's options, e.g.
    {"batch_size": "--batch-size", "power_buffer": "--power-buffer", "set_": "--set"}."""
    import typing

    from typer.models import OptionInfo

    out = {}
    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        meta = getattr(hint, "__metadata__", ())
        info = next((m for m in meta if isinstance(m, OptionInfo)), None)
        if info is None:  # an argument, or the return type
            continue
        # Annotated[..., typer.Option("--set")]: typer takes a default that starts with "-"
        # for the first of the option's names
        given = (info.default, *(info.param_decls or ()))
        decls = [d.split("/")[0] for d in given if isinstance(d, str) and d.startswith("--")]
        out[name] = decls[0] if decls else "--" + name.replace("_", "-")
    return out


def flags_named(message: str, command: Callable[..., Any], skip: Iterable[str] = ()) -> str:
    """`message` with the names of `command`'s options replaced by their flags.

    A config dataclass's ValueError names its fields ("batch_size must be ≥ 1"), as a Python
    API user passes them; at the command line the user typed --batch-size. Each option of the
    typer command function `command` whose name is in the message is replaced by its flag:
    a name with an underscore wherever it stands as a whole word, but not in a file name
    (power_buffer.csv) nor quoted (a list of field names: 'batch_size'); a one-word name only
    where it is the subject of a check ("steps ≥ 1", "lr must be > 0", "need mode 'fine'"),
    so that prose ("3 steps", "fine mode") is kept. Names in `skip` (fields the user set by
    name, e.g. `--set num_workers=…`) stay.
    """
    import re

    for name, flag in cli_flags(command).items():
        if name in skip:
            continue
        n = re.escape(name)
        if "_" in name:
            pattern = rf"(?<![\w.'\"-]){n}(?![\w'\"-]|\.\w)"
        else:
            pattern = rf"(?<![\w.'\"-]){n}(?=\s+(?:must\b|need\b|[≥≤<>=]))|(?<=\bneed ){n}\b"
        message = re.sub(pattern, flag, message)
    return message


def note_if_no_cuda(doing: str, costs: str, hint: str | None) -> bool:
    """Where torch sees no CUDA device, one line before the work starts: `doing` runs on the
    CPU, what that `costs` there, and a `hint` for a quick try (None: none). Returns whether
    it was said (torch is imported only here, so `--help` stays light)."""
    import torch

    if torch.cuda.is_available():
        return False
    note(f"no CUDA device: {doing} runs on the CPU, {costs}" + (f" ({hint})" if hint else ""))
    return True


def refuse_file_out(path) -> None:
    """Exit with the CLI's one-line message where `--out` names an existing file."""
    from pathlib import Path

    if path is not None and Path(path).exists() and not Path(path).is_dir():
        fail(f"--out {path} is a file, not a directory: choose another path")


def figure_text(f: Figure, reasons: list[str] | None = None) -> str:
    """One figure as text. With `reasons`, an unavailable figure's reason is numbered there
    once (shown under the table) and the figure refers to it: the same reason is said once."""
    if f.value is None:
        if reasons is None:
            return f"[yellow]unavailable[/] ({escape(str(f.reason))})"
        reason = f.reason or ""
        # A reason that quotes an earlier one refers to it instead of repeating it.
        for i, earlier in enumerate(list(reasons), 1):
            if earlier and earlier != reason and earlier in reason:
                reason = reason.replace(earlier, f"see [{i}]")
        if reason not in reasons:
            reasons.append(reason)
        return f"[yellow]unavailable[/] [{reasons.index(reason) + 1}]"
    s = f"{f.value / 2**20:,.0f} MiB" if f.unit == "B" else f"{f.value:,.4g} {f.unit}"
    if f.lo is not None and f.hi is not None and f.unit != "B":
        s += f"  [{f.lo:,.4g} … {f.hi:,.4g}]"
    src = f.source.value + (f", {f.signal}" if f.signal else "")
    if f.source.value == "simulated":
        return f"{s}  [bold magenta](SIMULATED)[/]"
    return f"{s}  [dim]({src})[/]"


def summary_table(summary: dict[str, Figure], title: str) -> Any:
    """The run's figures; the reasons of unavailable ones listed once, numbered, below."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, show_lines=False)
    t.add_column("figure", no_wrap=True)
    t.add_column("value")
    reasons: list[str] = []
    for k, f in summary.items():
        t.add_row(k, figure_text(f, reasons))
    if not reasons:
        return t
    notes = [Text(f"[{i}] unavailable: {r}", style="yellow") for i, r in enumerate(reasons, 1)]
    return Group(t, *notes)


class working:
    """`with working("attributing …"):` a spinner with the elapsed time on stderr while a long
    call runs, then one line saying how long it took (nothing when `quiet`)."""

    def __init__(self, message: str, quiet: bool = False) -> None:
        self.message = message
        self._shown = escape(message)
        self.quiet = quiet
        self._progress: Any = None

    def __enter__(self) -> working:
        import time

        self._t0 = time.perf_counter()
        if self.quiet:
            return self
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(self._shown, total=None)
        return self

    def update(self, message: str) -> None:
        """Change the line's text (a stage of the work)."""
        if self._progress is not None:
            self._progress.update(self._task, description=escape(message))

    def __exit__(self, exc_type, exc, tb) -> None:
        import time

        if self._progress is not None:
            self._progress.stop()
            if exc_type is None:
                note(f"{self.message.rstrip('…')} took {time.perf_counter() - self._t0:,.1f} s")
