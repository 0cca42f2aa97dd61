"""Text the terminal shows is shown as written: a message, reason or note holding brackets
(`pip install 'jouleprof[quant]'`, a path such as runs/[a]) is not taken for rich markup and
cut (the install advice of every missing-extra error once lost its extra)."""

from __future__ import annotations

import pytest

from jouleprof.cli import console
from jouleprof.types import Figure

ADVICE = "needs bitsandbytes: pip install 'jouleprof[quant]' (and [bold]a GPU)"


@pytest.fixture
def captured(monkeypatch):
    from rich.console import Console

    c = Console(record=True, width=200, color_system=None)
    monkeypatch.setattr(console, "err_console", c)
    return c


@pytest.mark.parametrize("say", [console.error, console.note])
def test_messages_keep_their_brackets(captured, say):
    say(ADVICE)
    assert ADVICE in captured.export_text()


def test_an_unavailable_figures_reason_keeps_its_brackets(captured):
    f = Figure.unavailable("J", ADVICE)
    captured.print(console.figure_text(f))
    assert ADVICE in captured.export_text()
    captured.print(console.summary_table({"gpu_energy_j": f}, "run"))
    assert ADVICE in captured.export_text()  # the numbered reason under the table


def test_the_working_line_shows_its_text_as_written(captured):
    with console.working("attributing runs/[a]…") as w:
        w.update("step [b] of [c]")
        assert w._progress.tasks[0].description == r"step \[b] of \[c]"
    assert "attributing runs/[a] took" in captured.export_text()
