"""Shared test setup: GPU tests (marker `gpu`) are skipped where no NVIDIA GPU is usable."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU with a driver on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
