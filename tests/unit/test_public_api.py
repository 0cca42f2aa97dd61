"""The package's documented entry points are what they say, however they are imported.

`from jouleprof import measure` once returned the *module* jouleprof/measure.py instead of the
function whenever that module had been imported before (the README's own example then failed
with "'module' object is not callable"); the module is now jouleprof/measurement.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _python_ok(code: str) -> None:
    """Run `code` in a fresh interpreter that imports jouleprof from this checkout."""
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "code",
    [
        "from jouleprof import measure, PhaseRecorder, Sampler",
        "import jouleprof; jouleprof.measure; from jouleprof import measure",
        "import jouleprof.measurement; from jouleprof import measure",
        "import jouleprof; measure = jouleprof.measure; measure = jouleprof.measure",
    ],
)
def test_measure_is_the_function_in_a_fresh_interpreter(code):
    _python_ok(code + "; import inspect; assert inspect.isfunction(measure), measure")


def test_importing_the_package_loads_neither_torch_nor_pynvml():
    _python_ok("import sys, jouleprof; assert not {'torch', 'pynvml'} & set(sys.modules), 'heavy'")


def test_unknown_attribute_names_itself():
    import jouleprof

    with pytest.raises(AttributeError, match="no_such_thing"):
        jouleprof.no_such_thing  # noqa: B018
