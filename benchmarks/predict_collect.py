"""Collect the inference-energy dataset the layer-wise predictor learns from (one H200 call).

One `jouleprof.measure` run covers the whole collection (counter read every refresh, NVML's
20 ms power buffer recorded); every measured window is a span in its spans.csv, so each window's
energy comes from the counter afterwards (timeline.windows, with bounds). Per configuration
(model x precision x batch), in priority order until --budget-s is spent:

- whole-model steady window: eval, inference_mode, autocast at the precision (entered per pass;
  none for fp32), random normal input on the GPU, 3 warm-up passes (+ --settle-s), then passes with
  a synchronize after each for --window-s seconds -> models.csv (passes, seconds, span).
- per-layer times: --layer-passes extra passes with a CUDA event at every module's entry and exit
  -> layers.csv (each module's own time: its span minus its children's).
- the full protocol (>= 6 s windows) on a few configurations at the end (--protocol-check), so
  the short windows' bias against the 6 s protocol is measured, not assumed.
- ceilings first (matmul per precision, copy bandwidth, launch overhead) -> ceilings.json.

Resumable: a rerun into the same --out starts a new run_NNN/ and skips configurations already in
models.csv. An error or OOM is a row. Smoke test on a CPU:
    PYTHONPATH=src python3 benchmarks/predict_collect.py --out /tmp/pc --smoke
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

# Families named the way the leave-family-out evaluation groups them.
MODELS = [
    ("resnet", "torchvision:resnet18"), ("vit", "timm:vit_small_patch16_224"),
    ("efficientnet", "timm:efficientnet_b0"), ("convnext", "timm:convnext_tiny"),
    ("swin", "timm:swin_tiny_patch4_window7_224"), ("mobilenet", "torchvision:mobilenet_v2"),
    ("regnet", "timm:regnety_016"), ("densenet", "torchvision:densenet121"),
    ("mixer", "timm:mixer_b16_224"), ("vgg", "torchvision:vgg11_bn"),
    ("resnet", "torchvision:resnet50"), ("vit", "timm:vit_base_patch16_224"),
    ("efficientnet", "timm:efficientnet_b3"), ("convnext", "timm:convnext_small"),
    ("swin", "timm:swin_small_patch4_window7_224"), ("mobilenet", "torchvision:mobilenet_v3_large"),
    ("regnet", "timm:regnetx_032"), ("densenet", "torchvision:densenet169"),
    ("mixer", "timm:mixer_s16_224"), ("vit", "timm:deit_small_patch16_224"),
    ("inception", "torchvision:inception_v3"), ("shufflenet", "torchvision:shufflenet_v2_x1_0"),
    ("resnet", "timm:resnext50_32x4d"), ("vit", "timm:vit_tiny_patch16_224"),
    ("efficientnet", "torchvision:efficientnet_v2_s"), ("convnext", "timm:convnext_nano"),
    ("swin", "torchvision:swin_t"), ("mobilenet", "timm:mobilenetv3_small_100"),
    ("regnet", "torchvision:regnet_y_800mf"), ("mixer", "timm:resmlp_12_224"),
    ("vgg", "torchvision:vgg16"), ("resnet", "torchvision:resnet101"),
    ("vit", "timm:deit_base_patch16_224"), ("mobilenet", "torchvision:mnasnet1_0"),
    ("poolformer", "timm:poolformer_s12"), ("regnet", "timm:regnety_040"),
    ("densenet", "torchvision:densenet201"), ("resnet", "torchvision:wide_resnet50_2"),
    ("vit", "timm:vit_base_patch32_224"), ("efficientnet", "timm:efficientnet_b1"),
]  # fmt: skip
TIERS = [("bf16", 64), ("bf16", 1), ("fp32", 64), ("bf16", 256), ("bf16", 8), ("fp32", 1),
         ("fp32", 256), ("fp32", 8)]  # fmt: skip
SMOKE_MODELS = [("resnet", "torchvision:resnet18"), ("vit", "timm:vit_tiny_patch16_224")]
SMOKE_TIERS = [("bf16", 1), ("fp32", 2)]
MODEL_COLUMNS = ["config_id", "run", "family", "spec", "precision", "batch", "status", "passes",
                 "window_s", "s_per_pass", "t0_s", "t1_s", "protocol", "peak_mem_bytes",
                 "error"]  # fmt: skip
LAYER_COLUMNS = ["config_id", "spec", "precision", "batch", "module", "module_type", "calls",
                 "self_s", "total_s"]  # fmt: skip


def config_id(spec: str, precision: str, batch: int, protocol: str = "short") -> str:
    return f"{spec}|{precision}|b{batch}|{protocol}"


class Rows:
    """Appends CSV rows, flushing each, so a kill loses nothing already measured."""

    def __init__(self, path: Path, columns: list[str]):
        self.path, self.columns = path, columns
        new = not path.exists()
        self.f = path.open("a", newline="")
        self.w = csv.DictWriter(self.f, columns, extrasaction="ignore")
        if new:
            self.w.writeheader()

    def write(self, row: dict) -> None:
        self.w.writerow(row)
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def done_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with path.open() as f:
        return {r["config_id"] for r in csv.DictReader(f) if r.get("status") in ("ok", "oom")}


def timed_layers(model, x, run_pass, sync, passes: int):
    """Each module's own time (s) per pass, from CUDA events at module entry and exit."""
    import torch

    from jouleprof.predict.scopes import module_names, module_scopes

    types = {path: cls for path, cls in module_names(model).values()}
    frames: list[dict] = []
    open_ids: list[int] = []

    def enter(path):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        frames.append({"path": path, "parent": open_ids[-1] if open_ids else -1, "start": ev})
        open_ids.append(len(frames) - 1)

    def leave(path):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        frames[open_ids.pop()]["end"] = ev

    with module_scopes(model, enter, leave):
        for _ in range(passes):
            run_pass()
    sync()
    totals = [f["start"].elapsed_time(f["end"]) / 1e3 if "end" in f else 0.0 for f in frames]
    child = [0.0] * len(frames)
    for i, f in enumerate(frames):
        if f["parent"] >= 0:
            child[f["parent"]] += totals[i]
    out: dict[str, dict] = {}
    for i, f in enumerate(frames):
        d = out.setdefault(f["path"], {"self_s": 0.0, "total_s": 0.0, "calls": 0})
        d["self_s"] += (totals[i] - child[i]) / passes
        d["total_s"] += totals[i] / passes
        d["calls"] += 1
    for path, d in out.items():
        d["calls"] = d["calls"] // passes
        d["module_type"] = types.get(path, "")
    return out


def run_config(model, shape, precision, batch, device, window_s, settle_s, clock):
    """The steady protocol: returns (passes, t0, t1, run_pass). Raises on OOM/errors."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    x = torch.randn((batch, *shape), device=device)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dev_type = "cuda" if cuda else "cpu"

    def run_pass():
        with (
            torch.inference_mode(),
            torch.autocast(dev_type, dtype=dtype, enabled=dtype is not None),
        ):
            model(x)

    for _ in range(3):
        run_pass()
        sync()
    t_end = time.perf_counter() + settle_s
    while time.perf_counter() < t_end:
        run_pass()
        sync()
    t0 = clock.now_s()
    n = 0
    while True:
        run_pass()
        sync()
        n += 1
        t1 = clock.now_s()
        if t1 - t0 >= window_s:
            return n, t0, t1, run_pass, sync, x


def _meta(args, out: Path, device: str) -> dict:
    import torch

    commit = os.environ.get("JP_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    check=False).stdout.strip() or None  # fmt: skip
        except OSError:
            commit = None
    meta = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "command": " ".join([sys.executable, *sys.argv]),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    meta["allow_tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                          "cudnn": torch.backends.cudnn.allow_tf32}  # fmt: skip
    if device.startswith("cuda"):
        meta["gpu_name"] = torch.cuda.get_device_name(0)
        try:
            import pynvml

            pynvml.nvmlInit()
            meta["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception as e:  # noqa: BLE001
            meta["driver"] = f"unavailable: {e}"
    try:
        import timm
        import torchvision

        meta["timm"], meta["torchvision"] = timm.__version__, torchvision.__version__
    except ImportError as e:
        meta["missing"] = str(e)
    return meta


def plan(models, tiers, done: set[str]):
    return [(fam, spec, prec, b) for prec, b in tiers for fam, spec in models
            if config_id(spec, prec, b) not in done]  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--budget-s", type=float, default=400.0, help="stop starting configs after this"
    )
    ap.add_argument("--window-s", type=float, default=1.5, help="measured window per config")
    ap.add_argument("--settle-s", type=float, default=0.3, help="extra warm-up after 3 passes")
    ap.add_argument("--layer-passes", type=int, default=2)
    ap.add_argument(
        "--protocol-check",
        type=int,
        default=4,
        help="configs re-measured with the full >= 6 s protocol at the end",
    )
    ap.add_argument("--protocol-s", type=float, default=6.0)
    ap.add_argument("--ceilings-s", type=float, default=0.8)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run with a simulated GPU")
    args = ap.parse_args(argv)

    import torch

    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.types import Span
    from jouleprof.workloads.zoo import resolve

    smoke = args.smoke or not torch.cuda.is_available()
    if smoke and not args.smoke:
        print("no CUDA GPU: running the smoke configuration on the CPU", file=sys.stderr)
    device = "cpu" if smoke else "cuda"
    models, tiers = (SMOKE_MODELS, SMOKE_TIERS) if smoke else (MODELS, TIERS)
    window_s, protocol_s = (0.2, 0.4) if smoke else (args.window_s, args.protocol_s)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    k = 0
    while (out / f"run_{k:03d}").exists():
        k += 1
    run_name = f"run_{k:03d}"
    meta = _meta(args, out, device)
    meta["run_dir"] = run_name
    (out / f"meta_{run_name}.json").write_text(json.dumps(meta, indent=2))
    models_csv = out / "models.csv"
    todo = plan(models, tiers, done_ids(models_csv))
    mrows, lrows = Rows(models_csv, MODEL_COLUMNS), Rows(out / "layers.csv", LAYER_COLUMNS)
    t_start = time.perf_counter()
    cache: dict[str, tuple] = {}
    cfg = MeasureConfig(interval_s=0.02, counter_interval_s=0.1, idle_s=2.0, power_buffer=not smoke,
                        kind="predict_collect",
                        simulate_gpu_w=300.0 if smoke else None)  # fmt: skip
    step = [0]
    with measure(out / run_name, cfg, run_config={"collect": meta}) as m:
        spans = m.span_writer()

        def mark(name, t0, t1):
            spans.write([Span(step[0], name, t0, t1)])
            step[0] += 1

        if not smoke:
            from jouleprof.predict.calibrate import measure_ceilings

            ceil = measure_ceilings("cuda", args.ceilings_s, mark, m.clock.now_s)
            (out / f"ceilings_{run_name}.json").write_text(json.dumps(ceil, indent=2))
            print("ceilings:", json.dumps(ceil), flush=True)

        def one(fam, spec, prec, batch, win, protocol):
            cid = config_id(spec, prec, batch, protocol)
            row = {"config_id": cid, "run": run_name, "family": fam, "spec": spec,
                   "precision": prec,
                   "batch": batch, "protocol": protocol}  # fmt: skip
            try:
                if spec not in cache:
                    zm = resolve(spec)
                    try:  # initialize on the GPU itself: a CPU init of 100M parameters takes s
                        with torch.device(device):
                            net = zm.factory()
                    except Exception:  # noqa: BLE001
                        net = zm.factory()
                    cache[spec] = (net.eval().to(device), zm.input_shape)
                model, shape = cache[spec]
                if device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                n, t0, t1, run_pass, sync, x = run_config(
                    model, shape, prec, batch, device, win, args.settle_s, m.clock
                )
                mark(cid, t0, t1)
                row.update(status="ok", passes=n, window_s=t1 - t0, s_per_pass=(t1 - t0) / n,
                           t0_s=t0, t1_s=t1)  # fmt: skip
                if device == "cuda":
                    row["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
                    if protocol == "short" and args.layer_passes > 0:
                        lay = timed_layers(model, x, run_pass, sync, args.layer_passes)
                        for path, d in lay.items():
                            lrows.write({"config_id": cid, "spec": spec, "precision": prec,
                                         "batch": batch, "module": path, **d})  # fmt: skip
                del x
            except torch.cuda.OutOfMemoryError as e:
                row.update(status="oom", error=str(e).splitlines()[0][:200])
            except Exception as e:  # noqa: BLE001 - one failed config is a row
                row.update(status="error", error=f"{type(e).__name__}: {e}"[:300])
                traceback.print_exc(limit=2)
            finally:
                if device == "cuda":
                    torch.cuda.empty_cache()
            mrows.write(row)
            return row

        reserve = 0.0 if smoke else args.protocol_check * (protocol_s + 1.5)
        n_ok = 0
        for i, (fam, spec, prec, b) in enumerate(todo):
            if time.perf_counter() - t_start > args.budget_s - reserve:
                print(f"budget reached after {i} of {len(todo)} configs", flush=True)
                break
            r = one(fam, spec, prec, b, window_s, "short")
            n_ok += r["status"] == "ok"
            print(f"[{time.perf_counter() - t_start:6.1f}s] {r['status']:5s} {r['config_id']} "
                  f"{r.get('s_per_pass', float('nan')) * 1e3:.2f} ms/pass", flush=True)  # fmt: skip
        checks = [(f, s) for f, s in models[: args.protocol_check]]
        for fam, spec in checks:
            if time.perf_counter() - t_start > args.budget_s:
                break
            r = one(fam, spec, "bf16", 64 if not smoke else 1, protocol_s, "full")
            print(f"[{time.perf_counter() - t_start:6.1f}s] {r['status']:5s} {r['config_id']}",
                  flush=True)  # fmt: skip
    mrows.close()
    lrows.close()
    try:
        from predict_energy import window_table  # benchmarks/predict_energy.py

        table = window_table(out)
        table.to_csv(out / "models_energy.csv", index=False)
        print(table.groupby(["precision", "batch"])["j_per_sample"].describe().to_string())
    except Exception as e:  # noqa: BLE001 - the raw rows are kept; energies can be rebuilt offline
        print(
            f"energy table not built here ({type(e).__name__}: {e}); rebuild offline with "
            "benchmarks/predict_energy.py",
            file=sys.stderr,
        )
    (out / "DONE_COLLECT").write_text(f"{n_ok} configs this run\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
