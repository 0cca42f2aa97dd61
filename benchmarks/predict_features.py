"""Trace every model of predict_collect.MODELS (CPU, no GPU) at batch 1 and 2 per precision and
write the operator records, so the dataset's features at any batch follow by linearity.

    PYTHONPATH=src python3 benchmarks/predict_features.py OUT_DIR [--precisions bf16 fp32] \
        [--cached-casts auto|yes|no]

--cached-casts: whether a steady pass skips the weights' casts to half precision. It must match
the torch the GPU ran: the collection's meta_run_*.json says (autocast_casts_per_pass: equal
counts = no cache = "no"); auto follows this machine's torch.

Writes OUT_DIR/ops/<spec>__<precision>__b<batch>.parquet and OUT_DIR/models_meta.csv (params,
module calls, input shape, unsupported operators); a file already there is skipped (resumable).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path


def safe(spec: str) -> str:
    return spec.replace(":", "_").replace("/", "_")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--precisions", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--models", nargs="*", default=None, help="specs (default: all of MODELS)")
    ap.add_argument("--cached-casts", choices=("auto", "yes", "no"), default="auto")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from predict_collect import MODELS

    from jouleprof.predict.features import ops_table, trace_model
    from jouleprof.workloads.zoo import resolve

    specs = args.models or [s for _, s in MODELS]
    cached = {"auto": None, "yes": True, "no": False}[args.cached_casts]
    (args.out / "ops").mkdir(parents=True, exist_ok=True)
    meta_path = args.out / "models_meta.csv"
    new = not meta_path.exists()
    with meta_path.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["spec", "precision", "batch", "params", "module_calls", "input_shape",
                        "flops", "bytes", "launches", "unsupported", "trace_s"])  # fmt: skip
        for spec in specs:
            zm = resolve(spec)
            for prec in args.precisions:
                for b in (1, 2):
                    p = args.out / "ops" / f"{safe(spec)}__{prec}__b{b}.parquet"
                    if p.exists():
                        continue
                    t = time.perf_counter()
                    try:
                        f = trace_model(zm, b, prec, cached_casts=cached)
                    except ValueError as e:
                        print(f"FAIL {spec} {prec} b{b}: {e}", flush=True)
                        continue
                    ops_table(f).to_parquet(p, index=False)
                    dt = time.perf_counter() - t
                    w.writerow([spec, prec, b, f.params, f.module_calls,
                                "x".join(map(str, f.input_shape)), f.flops, f.bytes_total,
                                f.launches, ";".join(f"{k}={v}" for k, v in f.unsupported.items()),
                                round(dt, 2)])  # fmt: skip
                    fh.flush()
                    print(f"{spec} {prec} b{b}: {f.flops / 1e9:.2f} GFLOP {dt:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
