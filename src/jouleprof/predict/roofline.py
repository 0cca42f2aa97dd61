"""Roofline bounds from a GPU's measured ceilings.

An operator cannot run faster than its FLOPs over the peak of the unit that runs it, nor than its
bytes over the memory bandwidth: t >= max(flops / peak, bytes / bandwidth). Matmul-like operators
(matmul, conv, attention) in bf16/fp16 run on tensor cores; in float32, PyTorch's defaults put
convolutions on TF32 tensor cores (cudnn.allow_tf32) and matmuls on the float32 units; all
other operators on the vector units.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from jouleprof.predict.features import LayerFeatures, OpRecord

TENSOR_CORE_CATEGORIES = ("matmul", "conv", "attention")


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's ceilings (gpus/*.json, or written by `jouleprof calibrate`)."""

    name: str
    matmul_flops_s: dict[str, float]
    """Dense matmul throughput per precision: bf16, fp16, fp32, tf32 (FLOP/s)."""
    vector_flops_s: float
    """Non-tensor-core float32 throughput (FLOP/s)."""
    mem_bytes_s: float
    """Device memory bandwidth (bytes read + written per second)."""
    launch_s: float
    """Host time to launch one small kernel back to back (s)."""
    idle_w: float | None
    full_load_w: float | None
    power_limit_w: float | None
    source: str = ""
    validated: bool = False
    """True only for a GPU the shipped predictor was trained and validated on."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k in ("bf16", "fp16", "fp32", "tf32"):
            v = self.matmul_flops_s.get(k)
            if v is None or v <= 0:
                raise ValueError(f"matmul_flops_s[{k!r}] must be a positive FLOP/s, got {v}")
        for name in ("vector_flops_s", "mem_bytes_s", "launch_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def _from_dict(d: dict, where: str, shipped: bool) -> GpuSpec:
    try:
        return GpuSpec(
            name=str(d["name"]),
            matmul_flops_s={k: float(v) for k, v in d["matmul_flops_s"].items()},
            vector_flops_s=float(d["vector_flops_s"]),
            mem_bytes_s=float(d["mem_bytes_s"]),
            launch_s=float(d["launch_s"]),
            idle_w=d.get("idle_w"),
            full_load_w=d.get("full_load_w"),
            power_limit_w=d.get("power_limit_w"),
            source=str(d.get("source", where)),
            # only a shipped file can say it is the GPU the predictor was validated on
            validated=bool(d.get("validated", False)) and shipped,
        )
    except KeyError as e:
        raise ValueError(f"GPU file {where} lacks the field {e.args[0]!r}") from e


def shipped_gpus() -> list[str]:
    """Names of the GPU files shipped in the package (e.g. "h200")."""
    root = resources.files("jouleprof.predict") / "gpus"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_gpu(name_or_path: str) -> GpuSpec:
    """A shipped GPU by name ("h200") or a GPU file written by `jouleprof calibrate`."""
    p = Path(name_or_path)
    if p.suffix == ".json":
        if not p.is_file():
            raise ValueError(
                f"GPU file {name_or_path!r} does not exist (make one: jouleprof calibrate)"
            )
        # a user's own file is never the one the predictor was validated on
        return _from_dict(json.loads(p.read_text()), str(p), shipped=False)
    names = shipped_gpus()
    if name_or_path.lower() not in names:
        raise ValueError(
            f"unknown GPU {name_or_path!r}: shipped GPUs are {names}; "
            "for another GPU give a file from `jouleprof calibrate --out FILE.json`"
        )
    f = resources.files("jouleprof.predict") / "gpus" / f"{name_or_path.lower()}.json"
    return _from_dict(json.loads(f.read_text()), f"gpus/{f.name}", shipped=True)


def op_peak_flops_s(op: OpRecord, gpu: GpuSpec) -> float:
    """The peak that bounds this operator's arithmetic."""
    if op.category in TENSOR_CORE_CATEGORIES:
        if op.dtype in ("bfloat16", "float16"):
            return gpu.matmul_flops_s["bf16" if op.dtype == "bfloat16" else "fp16"]
        if op.category == "conv":
            return gpu.matmul_flops_s["tf32"]
        return gpu.matmul_flops_s["fp32"]
    return gpu.vector_flops_s


def op_roofline(op: OpRecord, gpu: GpuSpec) -> tuple[float, float]:
    """(compute time, memory time) lower bounds of one operator call (s)."""
    return op.flops / op_peak_flops_s(op, gpu), (op.bytes_read + op.bytes_written) / gpu.mem_bytes_s


@dataclass(frozen=True)
class LayerBound:
    """A layer's roofline: the sum of its operators' bounds."""

    module: str
    compute_s: float
    memory_s: float
    roofline_s: float
    """Sum over the layer's operators of max(compute, memory)."""
    bound: str
    """"compute" or "memory": which side dominates the layer's roofline time."""


def layer_bounds(ops: list[OpRecord] | tuple[OpRecord, ...], gpu: GpuSpec,
                 layers: tuple[LayerFeatures, ...]) -> list[LayerBound]:  # fmt: skip
    """Roofline bound of each layer (same order as `layers`)."""
    acc: dict[str, list[float]] = {}
    for o in ops:
        c, m = op_roofline(o, gpu)
        a = acc.setdefault(o.module, [0.0, 0.0, 0.0, 0.0])  # compute, memory, roof, compute-side
        a[0] += c
        a[1] += m
        a[2] += max(c, m)
        a[3] += c if c >= m else 0.0
    out = []
    for layer in layers:
        c, m, r, cs = acc.get(layer.module, [0.0, 0.0, 0.0, 0.0])
        out.append(LayerBound(layer.module, c, m, r, "compute" if cs >= r - cs else "memory"))
    return out
