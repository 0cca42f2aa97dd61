"""`jouleprof run video`'s data-loader workers: 4 by default, never more than the usable cores
(more only contend, and torch warns about them); a number asked for is used as given."""

from __future__ import annotations

import os

import pytest

from jouleprof.bench.video_run import loader_workers


def test_default_is_four_capped_at_the_usable_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert loader_workers(None) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert loader_workers(None) == 4


@pytest.mark.parametrize("asked", [0, 3, 8])
def test_a_number_asked_for_is_used(monkeypatch, asked):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert loader_workers(asked) == asked
