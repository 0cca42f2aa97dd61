"""The terminal phase table: figures at a scale that keeps them short, so that a tiny phase (an
idle sliver between steps, a phase of microseconds) cannot push the table past 80 columns,
where rich would cut the figures ("111…" for a power)."""

from __future__ import annotations

import io

from rich.console import Console

from jouleprof.attribution.result import PhaseResult
from jouleprof.cli.attribute import _qty, _table


def test_quantities_take_the_scale_that_keeps_them_short():
    assert _qty(0.0238, "s") == "23.8 ms"
    assert _qty(2.724e-6, "s") == "2.724 µs"
    assert _qty(2.641, "J") == "2.641 J"
    assert _qty(0.006697, "J") == "6.697 mJ"
    assert _qty(2.1e-7, "J") == "0.21 µJ"
    assert _qty(0.0, "J") == "0 J"


def _row(phase, t_s, e_j, w, share, n=300):
    return PhaseResult(phase, t_s * n, t_s, e_j * n, 0.9 * e_j * n, 1.1 * e_j * n, w, share,
                       "regression", True, n_steps=n)  # fmt: skip


def test_a_table_with_tiny_phases_fits_80_columns_uncut():
    phases = [
        _row("data", 0.0238, 2.641, 111.0, 32.8),
        _row("forward/context", 0.003298, 1.642, 498.0, 20.4),
        _row("idle", 2.724e-6, 0.0002185, 80.0, None),
        _row("forward+backward", 0.003944, 2.507, 636.0, 31.1),
    ]
    truth = {"data": 2.617 * 300, "forward/context": 1.649 * 300, "idle": None,
             "forward+backward": 2.365 * 300}  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=80).print(_table(phases, "sim0 · regression", 0.95, truth))
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    for figure in ("111 W", "498 W", "636 W", "2.724 µs", "0.2185 mJ", "2.365 J"):
        assert figure in text, (figure, text)
