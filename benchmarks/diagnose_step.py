"""Why a V-JEPA2 step on real batches is slower than on one batch replayed: a GPU diagnostic.

On the H200 the vit_huge step trained on one replayed batch ran at 0.17–0.19 s, and on a fresh
batch every step at 0.3–1.4 s, with the GPU waiting on the host in the context forward and
the backward. Candidates, each isolated here (sync after every step, host seconds):

  fixed        one batch replayed (the reference);
  new_shapes   batches never seen, held in memory (no loader running): per-shape costs
               (a backend that builds a plan for every new sequence length) show here;
  seen_shapes  the same batches a second time: per-shape costs are paid by now;
  flash_new    new batches again, SDPA restricted to flash attention;
  loader_W     batches from a live DataLoader with W workers (CPU contention with decoding).

Writes one JSON with per-step times and each batch's context token counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="vit_huge")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--n", type=int, default=12, help="steps per condition")
    ap.add_argument("--workers", default="12,4")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from jouleprof.timeline.markers import NullRecorder
    from jouleprof.workloads.vjepa2 import get_preset
    from jouleprof.workloads.vjepa2.collate import make_loader
    from jouleprof.workloads.vjepa2.step import VJepa2Trainer

    dev = torch.device(args.device)
    n = args.n
    cfg = get_preset(args.preset, batch_size=args.batch_size, num_workers=12)
    trainer = VJepa2Trainer(cfg, dev, NullRecorder())
    loader = iter(make_loader(cfg, "fake", device=dev))
    batches = [next(loader) for _ in range(3 * n + 1)]
    if hasattr(loader, "_shutdown_workers"):
        loader._shutdown_workers()
    del loader

    def tokens(b) -> list[int]:
        return [int(c.shape[1]) for c in b.context]

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def run(name: str, seq) -> dict:
        times, waits, toks = [], [], []
        seq = iter(seq)
        while True:
            t_wait = time.perf_counter()
            b = next(seq, None)
            if b is None:
                break
            sync()
            t0 = time.perf_counter()
            trainer.train_step(b)
            sync()
            times.append(time.perf_counter() - t0)
            waits.append(t0 - t_wait)
            toks.append(tokens(b))
        r = {
            "name": name,
            "median_s": statistics.median(times),
            "mean_s": statistics.fmean(times),
            "step_s": [round(t, 4) for t in times],
            "fetch_s": [round(t, 4) for t in waits],
            "context_tokens": toks,
        }
        print(f"{name:14s} median {r['median_s']:.3f} s  mean {r['mean_s']:.3f} s", flush=True)
        return r

    results = {
        "preset": args.preset,
        "batch_size": args.batch_size,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "flash_sdp_enabled": torch.backends.cuda.flash_sdp_enabled(),
        "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled(),
        "mem_efficient_sdp_enabled": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "runs": [],
    }
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (out / "diagnose_step.json").write_text(json.dumps(results, indent=1))

    fixed = batches[0]
    run("warmup", [fixed] * 4)
    results["runs"].append(run("fixed", [fixed] * n))
    new = batches[1 : n + 1]
    results["runs"].append(run("new_shapes", new))
    results["runs"].append(run("seen_shapes", new))
    save()
    if dev.type == "cuda":
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            results["runs"].append(run("flash_new", batches[n + 1 : 2 * n + 1]))
            results["runs"].append(run("flash_seen", batches[n + 1 : 2 * n + 1]))
        save()
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
            results["runs"].append(run("cudnn_new", batches[2 * n + 1 : 3 * n + 1]))
        save()
    for w in (int(x) for x in args.workers.split(",")):
        cfg_w = get_preset(args.preset, batch_size=args.batch_size, num_workers=w)
        it = iter(make_loader(cfg_w, "fake", device=dev))
        next(it)
        time.sleep(2.0)  # let the workers fill their queues, as warm-up would
        results["runs"].append(run(f"loader_{w}", _take(it, 2 * n)))
        if hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        save()
    print(json.dumps({r["name"]: round(r["median_s"], 4) for r in results["runs"]}))


def _take(it, n):
    for _ in range(n):
        yield next(it)


if __name__ == "__main__":
    main()
