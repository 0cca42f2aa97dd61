"""Compatibility re-export: the workload protocols and registry live in
`jouleprof.workloads.registry`, the V-JEPA2 workload in `jouleprof.workloads.vjepa2.workload`.
"""

from __future__ import annotations

from typing import Any

from jouleprof.workloads.registry import (  # noqa: F401
    _REGISTRY,
    Session,
    Workload,
    get,
    names,
    register,
)

__all__ = ["Session", "Workload", "get", "names", "register"]  # and VJepa2Workload, lazily


def __getattr__(name: str) -> Any:
    # VJepa2Workload imports lazily, as the registry does.
    if name == "VJepa2Workload":
        from jouleprof.workloads.vjepa2.workload import VJepa2Workload

        return VJepa2Workload
    raise AttributeError(f"module 'jouleprof.bench.workloads' has no attribute {name!r}")
