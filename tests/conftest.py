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


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Tests (and the CLIs they start) cache clips and FLOP counts in a folder of their own."""
    import os

    if "JOULEPROF_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["JOULEPROF_CACHE_DIR"] = str(tmp_path_factory.mktemp("jouleprof_cache"))
    yield
    del os.environ["JOULEPROF_CACHE_DIR"]


@pytest.fixture(scope="session")
def load_benchmark():
    """Import a script of benchmarks/ by name (they are scripts, not a package; the folder
    goes on sys.path for the ones that import each other)."""
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load
