"""Shared test setup: GPU tests (marker `gpu`) are skipped where no NVIDIA GPU is usable;
`jouleprof_many` runs many failing `jouleprof` commands in one process."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

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


@functools.cache
def cuda_device_count() -> int:
    """CUDA devices torch can use here (0 without torch's CUDA build or a GPU)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


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


# Runs each argv through the real entry point, jouleprof.cli.main.main, one after another in
# one interpreter, each with its own captured stdout and stderr (and its log records): what a
# separate `jouleprof ...` process would print and exit with, without a fresh interpreter and
# fresh imports (torch alone is ~5 s of CPU) for every command. Anything that escapes main()
# is printed as a traceback into that command's stderr, where the tests look for one.
_MANY = r"""
import contextlib, io, json, logging, sys, traceback

class _Stderr:  # log records go to whatever stderr is current
    def write(self, s):
        return sys.stderr.write(s)

    def flush(self):
        sys.stderr.flush()

logging.basicConfig(
    level=logging.WARNING, stream=_Stderr(), format="%(levelname)s %(name)s: %(message)s"
)
from jouleprof.cli.main import main

results = []
for argv in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append({"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
with open(sys.argv[1], "w") as f:  # not stdout: a command's child may write there
    json.dump(results, f)
"""


def jouleprof_many(
    commands: list[list[str]], env: dict[str, str] | None = None, timeout: float = 600
) -> list[subprocess.CompletedProcess[str]]:
    """`jouleprof ARGS` for every ARGS of `commands`, in one process (see _MANY): a
    CompletedProcess each (returncode, stdout, stderr), in order. For commands that fail or end
    quickly, such as bad input; a run that trains or measures deserves a process of its own."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        results = os.path.join(d, "results.json")
        r = subprocess.run(
            [sys.executable, "-c", _MANY, results],
            input=json.dumps([[str(a) for a in c] for c in commands]),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        assert r.returncode == 0, f"the batch of jouleprof commands died: {r.stderr[-2000:]}"
        with open(results) as f:
            done = json.load(f)
    return [
        subprocess.CompletedProcess(["jouleprof", *c], x["rc"], x["stdout"], x["stderr"])
        for c, x in zip(commands, done, strict=True)
    ]
