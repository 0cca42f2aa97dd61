"""V-JEPA2 pretraining as a jouleprof workload: config, presets, masks, model, step, FLOPs.

The light names (config, presets, masks) import without torch; the torch ones load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jouleprof.workloads.vjepa2.config import VJepa2Config
from jouleprof.workloads.vjepa2.masks import REFERENCE_MASKS, MaskSpec, MultiBlock3dMasks
from jouleprof.workloads.vjepa2.presets import PRESETS, get_preset, preset_names

if TYPE_CHECKING:  # pragma: no cover
    from jouleprof.workloads.vjepa2.collate import (
        ClipBatchLoader,
        VJepa2Batch,
        VJepa2Collator,
        make_loader,
    )
    from jouleprof.workloads.vjepa2.flops import flops_per_sample
    from jouleprof.workloads.vjepa2.loop import RunSummary, run
    from jouleprof.workloads.vjepa2.step import StepResult, VJepa2Trainer

_LAZY = {
    "ClipBatchLoader": "collate",
    "VJepa2Batch": "collate",
    "VJepa2Collator": "collate",
    "make_loader": "collate",
    "flops_per_sample": "flops",
    "RunSummary": "loop",
    "run": "loop",
    "StepResult": "step",
    "VJepa2Trainer": "step",
}

__all__ = [
    "PRESETS",
    "REFERENCE_MASKS",
    "MaskSpec",
    "MultiBlock3dMasks",
    "VJepa2Config",
    "get_preset",
    "preset_names",
    "ClipBatchLoader",
    "VJepa2Batch",
    "VJepa2Collator",
    "make_loader",
    "flops_per_sample",
    "RunSummary",
    "run",
    "StepResult",
    "VJepa2Trainer",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"jouleprof.workloads.vjepa2.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'jouleprof.workloads.vjepa2' has no attribute {name!r}")
