"""Where the repository's committed measurements are, seen from wherever a command runs.

`jouleprof predict evaluate` scores the predictors on data measured on an H200 and committed
under benchmarks/results/. An install from a clone (`pip install -e .`) can be run from any
folder, so the folder is looked for under the working directory first, then above the package
(the clone it was installed from)."""

from __future__ import annotations

from pathlib import Path


def committed_results(folder: str, marker: str) -> Path | None:
    """benchmarks/results/`folder` holding the file `marker`, under the working directory or
    any folder above this package; None where neither has it."""
    for base in (Path.cwd(), *Path(__file__).resolve().parents):
        p = base / "benchmarks" / "results" / folder
        if (p / marker).is_file():
            return p
    return None
