"""Terminal output shared by the subcommands (rich, to stderr for messages)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from jouleprof.types import Figure

err_console = Console(stderr=True, soft_wrap=True)  # messages stay whole lines (grep-able)
out_console = Console()


def error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)


def note(message: str) -> None:
    err_console.print(f"[dim]{message}[/]", highlight=False)


def fail(message: str, code: int = 2) -> None:
    """Print an error for the user and exit with `code`."""
    import typer

    error(message)
    raise typer.Exit(code)


def figure_text(f: Figure) -> str:
    if f.value is None:
        return f"[yellow]unavailable[/] ({f.reason})"
    s = f"{f.value / 2**20:,.0f} MiB" if f.unit == "B" else f"{f.value:,.4g} {f.unit}"
    if f.lo is not None and f.hi is not None and f.unit != "B":
        s += f"  [{f.lo:,.4g} … {f.hi:,.4g}]"
    src = f.source.value + (f", {f.signal}" if f.signal else "")
    return f"{s}  [dim]({src})[/]"


def summary_table(summary: dict[str, Figure], title: str) -> Any:
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    t.add_column("figure")
    t.add_column("value")
    for k, f in summary.items():
        t.add_row(k, figure_text(f))
    return t
