"""What a benchmark script records about where its numbers came from (meta.json).

Every script under benchmarks/ writes one: the date, the command, the commit (JP_COMMIT where
the tree travelled without git, else `git rev-parse HEAD`), Python, torch and the packages it
names, and the GPU, its driver and its power limit as NVML reports them. Nothing here stops a
run: what cannot be read is said ("unavailable: ..."), never left out silently.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def commit(root: str | Path = ".") -> str:
    """JP_COMMIT if set, else the checkout's HEAD, else "unknown"."""
    if os.environ.get("JP_COMMIT"):
        return os.environ["JP_COMMIT"]
    try:
        r = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _torch_part() -> dict[str, Any]:
    try:
        import torch

        cuda = torch.cuda.is_available()
        return {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if cuda else None}
    except Exception as e:  # noqa: BLE001 - the record must not stop the run
        return {"torch": f"unavailable: {e}", "gpu": None}


def _nvml_part() -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            return {
                "driver": pynvml.nvmlSystemGetDriverVersion(),
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001
        return {"driver": f"unavailable: {type(e).__name__}", "power_limit_w": None}


def benchmark_meta(
    command: list[str], packages: tuple[str, ...] = (), root: str | Path = "."
) -> dict[str, Any]:
    """The record of one call: date, command, commit, versions, GPU (module docstring)."""
    meta: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(command),
        "git_commit": commit(root),
        "python": platform.python_version(),
        **_torch_part(),
    }
    for pkg in packages:
        try:
            meta[pkg] = version(pkg)
        except PackageNotFoundError:
            meta[pkg] = "not installed"
    meta.update(_nvml_part())
    return meta


def write_meta(out: str | Path, meta: dict[str, Any], keep_calls: bool = False) -> dict[str, Any]:
    """Write `meta` to out/meta.json; with `keep_calls`, a resumed output keeps the dates of
    its earlier calls under "calls" (the newest last)."""
    p = Path(out) / "meta.json"
    if keep_calls:
        calls = json.loads(p.read_text()).get("calls", []) if p.exists() else []
        meta = {**meta, "calls": [*calls, meta["date_utc"]]}
    p.write_text(json.dumps(meta, indent=2) + "\n")
    return meta
