"""Measure this GPU's power-buffer lag with a short loop of varied steps (`jouleprof sensors
--lag-out FILE`), for `jouleprof attribute --sensor FILE` on runs whose steps are all alike.

The loop: a bf16 GEMM burst (~8 ms), a memory-bound copy (~4 ms) and a host-side wait
(~2 ms), measured in fine mode with the power buffer, and with short excitation gaps before
its phases in 30 % of the steps of its first 75 % (`ExciteConfig`). Those gaps move every
phase's edges against the buffer's sample windows, which pins the lag; the regression then
fits it and `attribution.sensor_file` writes it. On an H100 the lags fitted on two different
loops with such gaps, an inference loop and a ViT training loop, were 3.74 and 3.70 ms
(benchmarks/results/ref_loops, `h100_call13/`, `h100_call15/`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

GEMM_MS = 8.0
COPY_MS = 4.0
HOST_WAIT_S = 0.002
EXCITE_FRACTION = 0.3
MIN_SECONDS = 10.0


def _timed_ms(torch: Any, fn, reps: int = 5) -> float:
    """The mean GPU time of `fn` (ms), after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t0) / reps


def run_lag_loop(out: str | os.PathLike[str], seconds: float = 30.0, gpu: int = 0) -> Path:
    """Run the loop for `seconds` on CUDA device `gpu`, measured into run directory `out`
    (nothing attributed yet). Returns the run directory."""
    import torch

    import jouleprof
    from jouleprof.timeline.excite import ExciteConfig

    if seconds < MIN_SECONDS:
        raise ValueError(f"the lag loop needs at least {MIN_SECONDS:g} s, got {seconds:g}")
    dev = torch.device(f"cuda:{gpu}")
    torch.cuda.set_device(dev)
    n = 4096
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    src = torch.empty(256 * 2**20, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    n_gemm = max(1, round(GEMM_MS / _timed_ms(torch, lambda: a @ b)))
    n_copy = max(1, round(COPY_MS / _timed_ms(torch, lambda: dst.copy_(src))))
    excite = ExciteConfig(fraction=EXCITE_FRACTION, window_s=0.75 * seconds)
    with jouleprof.profile(out, gpus=(gpu,), excite=excite, attribute=False, report=False,
                           device=dev) as prof:  # fmt: skip
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            with prof.step():
                with prof.phase("gemm"):
                    for _ in range(n_gemm):
                        a @ b
                with prof.phase("copy"):
                    for _ in range(n_copy):
                        dst.copy_(src)
                with prof.phase("host"):
                    torch.cuda.synchronize(dev)
                    time.sleep(HOST_WAIT_S)
    assert prof.run_dir is not None
    return prof.run_dir
