"""Where activation sparsity could save energy: a dense and a sparse (CSR) matmul at several
sparsities, each timed and measured for energy on the GPU.

An activation matrix X (M×K) with a fraction `s` of its entries zero (placed at random, as
ReLU zeros fall) is multiplied by a dense weight W (K×N):

- dense: ``X @ W`` (cuBLAS) executes every multiply-accumulate whatever X holds; only its power
  may depend on the data (zeros toggle fewer bits);
- sparse: ``torch.sparse.mm(X_csr, W)`` with X in CSR form (cuSPARSE) executes only the nonzero
  entries' MACs, at a cost per MAC far above the dense kernel's.

Each (kernel, sparsity) loops for `seconds` inside one `jouleprof.measure` run (one span per
loop, on the run's clock), so the per-operation time and energy come from the same counter
windows as the study's cells. Writes OUT/run.json (the run) and returns rows for
sparse_probe.json.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_SPARSITIES = (0.0, 0.5, 0.9, 0.99)


def _loop(fn, seconds: float, sync) -> tuple[int, float]:
    """Run fn repeatedly for about `seconds`; returns (calls, elapsed s), device-synchronized."""
    fn()
    sync()
    n, t0 = 0, time.perf_counter()
    batch = 1
    while True:
        for _ in range(batch):
            fn()
        n += batch
        sync()
        el = time.perf_counter() - t0
        if el >= seconds:
            return n, el
        batch = min(batch * 2, 256)


def run_probe(
    out: Path,
    sparsities: Sequence[float] = DEFAULT_SPARSITIES,
    m: int = 4096,
    k: int = 1024,
    n: int = 1024,
    seconds: float = 0.8,
    device: str = "auto",
    simulate_gpu_w: float | None = None,
) -> dict[str, Any]:
    """Measure the dense and CSR matmuls at each sparsity; returns {"rows": [...], ...}."""
    import torch

    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.types import Span
    from jouleprof.workloads.energy_aware.figures import span_energy

    bad = [s for s in sparsities if not 0 <= s < 1]
    if bad:
        raise ValueError(f"sparsities must be in [0, 1), got {bad}")
    dev = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    )

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    g = torch.Generator(device="cpu").manual_seed(0)
    w = torch.randn(k, n, generator=g).to(dev)
    base = torch.rand(m, k, generator=g).to(dev)  # ReLU-like: nonnegative
    keep = torch.rand(m, k, generator=g).to(dev)
    gpus = (dev.index or 0,) if dev.type == "cuda" else ()
    cfg = MeasureConfig(
        gpus=gpus,
        hardware_gpus=gpus or None,
        idle_s=0.0,
        kind="sparse-probe",
        rapl=False,
        simulate_gpu_w=simulate_gpu_w,
    )
    loops: list[dict[str, Any]] = []
    with measure(out, cfg, run_config={"m": m, "k": k, "n": n, "seconds": seconds}) as meas:
        writer = meas.span_writer()
        for i, s in enumerate(sparsities):
            x = torch.where(keep >= s, base, torch.zeros((), device=dev))
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                x_csr = x.to_sparse_csr()
            for kernel, fn in (
                ("dense", lambda x=x: x @ w),
                ("sparse", lambda x_csr=x_csr: torch.sparse.mm(x_csr, w)),
            ):
                t0 = meas.clock.now_s()
                calls, el = _loop(fn, seconds, sync)
                t1 = meas.clock.now_s()
                writer.write([Span(i, f"{kernel}@{s:g}", t0, t1, t0, t1)])
                loops.append(
                    {
                        "sparsity": s,
                        "kernel": kernel,
                        "calls": calls,
                        "t0": t0,
                        "t1": t1,
                        "s_per_op": el / calls,
                    }
                )
        writer.close()
    from jouleprof.store.rundir import RunDir

    rd = RunDir(out)
    rec = rd.read_record()
    samples = rd.read_samples() if rd.has("samples.csv") else None
    devices = sorted({key.split(".")[0] for key in rec.summary if "." in key})
    gpu_fig = rec.summary.get("gpu_energy_j")
    why = (gpu_fig.reason if gpu_fig is not None else None) or "no GPU was measured"
    rows: dict[float, dict[str, Any]] = {}
    for lp in loops:
        e, _ = span_energy(samples, devices, lp["t0"], lp["t1"], why)
        r = rows.setdefault(lp["sparsity"], {"sparsity": lp["sparsity"]})
        r[f"{lp['kernel']}_s"] = lp["s_per_op"]
        r[f"{lp['kernel']}_j"] = e.value / lp["calls"] if e.value is not None else None
        r[f"{lp['kernel']}_energy_source"] = e.source.value
        if e.value is None:
            r[f"{lp['kernel']}_energy_reason"] = e.reason
        r[f"{lp['kernel']}_power_w"] = (
            e.value / (lp["t1"] - lp["t0"]) if e.value is not None else None
        )
    rec.extra["probe_rows"] = list(rows.values())
    rd.write_record(rec)
    return {
        "shape": {"m": m, "k": k, "n": n},
        "device": str(dev),
        "seconds": seconds,
        "rows": list(rows.values()),
    }
