"""A GPU's ceilings, measured: matmul throughput per precision, copy bandwidth, launch overhead,
idle and full-load power. `jouleprof calibrate` writes them as a GPU file (gpus/*.json format)
that `jouleprof predict infer --gpu FILE.json` reads.

The loops here touch torch.cuda (the measuring edge); `ceilings_from_runs` and `write_gpu_file`
are pure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MATMUL_DTYPES = ("bf16", "fp16", "fp32", "tf32")


def _loop(fn: Callable[[], None], seconds: float, sync: Callable[[], None]) -> tuple[int, float]:
    fn()
    sync()
    n = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(4):
            fn()
        n += 4
        sync()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n, dt


def measure_ceilings(
    device: str = "cuda",
    seconds: float = 0.8,
    mark: Callable[[str, float, float], None] | None = None,
    now_s: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Run each ceiling's loop for about `seconds`; `mark(name, t0, t1)` records its window
    (on the clock `now_s`) so the caller can read its power from a measurement."""
    import torch

    now = now_s or time.perf_counter
    sync = torch.cuda.synchronize
    out: dict[str, Any] = {"matmul_flops_s": {}}
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
              "tf32": torch.float32}  # fmt: skip
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name in MATMUL_DTYPES:
            n = 8192 if name in ("bf16", "fp16", "tf32") else 4096
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            a = torch.randn(n, n, device=device, dtype=dtypes[name])
            b = torch.randn(n, n, device=device, dtype=dtypes[name])
            t0 = now()
            k, dt = _loop(lambda a=a, b=b: torch.mm(a, b), seconds, sync)
            if mark:
                mark(f"matmul_{name}", t0, now())
            out["matmul_flops_s"][name] = 2.0 * n**3 * k / dt
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    src = torch.empty(256 * 2**20, device=device, dtype=torch.float32)  # 1 GiB
    dst = torch.empty_like(src)
    t0 = now()
    k, dt = _loop(lambda s=src, d=dst: d.copy_(s), seconds, sync)
    if mark:
        mark("copy", t0, now())
    out["copy_bytes_s"] = 2.0 * src.numel() * 4 * k / dt  # read + write
    del src, dst
    tiny = torch.zeros(1, device=device)
    t0 = now()
    k, dt = _loop(lambda: tiny.add_(1.0), min(seconds, 0.5), sync)
    if mark:
        mark("launch", t0, now())
    out["launch_s"] = dt / k
    out["gpu_name"] = torch.cuda.get_device_name(device)
    return out


def gpu_file(ceilings: dict[str, Any], power: dict[str, float | None], source: str) -> dict:
    """The GPU-file dict from measured ceilings and power (`power`: idle_w, matmul_bf16_w ...)."""
    mm = ceilings["matmul_flops_s"]
    return {
        "name": ceilings.get("gpu_name", "unknown"),
        "source": source,
        "matmul_flops_s": {
            "bf16": mm["bf16"],
            "fp16": mm["fp16"],
            "fp32": mm["fp32"],
            "tf32": mm["tf32"],
        },  # fmt: skip
        "vector_flops_s": mm["fp32"],
        "mem_bytes_s": ceilings["copy_bytes_s"],
        "launch_s": ceilings["launch_s"],
        "idle_w": power.get("idle_w"),
        "full_load_w": power.get("matmul_bf16_w"),
        "copy_w": power.get("copy_w"),
        "power_limit_w": power.get("power_limit_w"),
    }


def write_gpu_file(data: dict, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2) + "\n")
    return p
