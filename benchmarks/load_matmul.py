"""A known GPU load: a loop of bf16 8192³ matrix products, steady or as a square wave.

Used by the measurement-core benchmark as the workload `jouleprof measure` wraps. Prints one
JSON line with what it did (seconds, products, achieved TFLOP/s).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--n", type=int, default=8192, help="matrix size")
    ap.add_argument(
        "--square-wave-s",
        type=float,
        default=0.0,
        help="if > 0: alternate this long busy / this long idle (power steps for the sensors)",
    )
    args = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16, generator=g)
    c = torch.empty_like(a)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    n_products = 0
    busy_s = 0.0
    t_end = time.perf_counter() + args.seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        stop = t0 + (args.square_wave_s if args.square_wave_s > 0 else t_end - t0)
        while time.perf_counter() < min(stop, t_end):
            for _ in range(8):
                torch.matmul(a, b, out=c)
            n_products += 8
            torch.cuda.synchronize()
        busy_s += time.perf_counter() - t0
        if args.square_wave_s > 0:
            time.sleep(min(args.square_wave_s, max(t_end - time.perf_counter(), 0)))
    flops = 2.0 * args.n**3 * n_products
    print(
        json.dumps(
            {
                "seconds": args.seconds,
                "square_wave_s": args.square_wave_s,
                "products": n_products,
                "busy_s": busy_s,
                "tflops_while_busy": flops / busy_s / 1e12 if busy_s else None,
            }
        )
    )


if __name__ == "__main__":
    main()
