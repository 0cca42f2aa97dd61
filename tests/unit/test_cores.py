"""cores.usable_cores: the affinity mask's size, or None where the OS cannot say."""

from __future__ import annotations

import os

from jouleprof import cores


def test_usable_cores_is_the_affinity_mask_and_none_without_one(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert cores.usable_cores() == 3
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert cores.usable_cores() is None
