"""Collect the inference-energy dataset the layer-wise predictor learns from (one H200 call).

Every window is measured with `jouleprof infer --protocol steady`'s own loop
(`jouleprof.bench.infer_loop.steady_window` inside `inference_context`: inference_mode and autocast
entered once around every pass, 3 warm-up passes, a synchronize after each pass, the window's
edges read densely), so the predictor learns what a user's `jouleprof infer` measures; only the
window's length differs (--window-s, default 1.5 s, against the command's >= 6 s).

One `jouleprof.measure` run covers the collection (counter read every refresh, NVML's 20 ms power
buffer recorded); every window is a span in its spans.csv, and its energy comes from the counter
afterwards (timeline.windows, with bounds). Per configuration (model x precision x batch), in the
order of PLAN until --budget-s is spent:

- whole-model steady window -> models.csv (passes, seconds, span);
- per-layer times: --layer-passes extra passes with a CUDA event at every module's entry and exit
  -> layers.csv (each module's own time: its span minus its children's);
- ceilings first (matmul per precision, copy bandwidth, launch overhead) -> ceilings_run_NNN.json;
- at the end, CHECKS re-measured with the command's >= 6 s window (protocol "full"), then
  `jouleprof infer --protocol steady` itself (a subprocess, its own run directory under e2e/) on
  E2E, models the predictor never saw -> e2e.csv, for the end-to-end check against
  `jouleprof predict infer` (benchmarks/predict_e2e.py, offline).

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
# (precision, batch, how many of MODELS): most informative first. The first two re-measure the
# validation targets on the shared loop; then fp32 and the batch sizes not measured before.
PLAN = [("bf16", 64, None), ("bf16", 1, None), ("fp32", 64, None), ("bf16", 256, 20),
        ("bf16", 16, 20), ("fp32", 1, 20), ("bf16", 256, None), ("bf16", 16, None),
        ("fp16", 64, None), ("fp32", 1, None), ("fp32", 256, None)]  # fmt: skip
# re-measured with the full >= 6 s window (the short windows' bias, measured)
CHECKS = [("timm:efficientnet_b0", "bf16", 64), ("torchvision:resnet50", "bf16", 1),
          ("timm:convnext_tiny", "fp32", 64)]  # fmt: skip
# `jouleprof infer` end to end on models not in MODELS (a family never seen: squeezenet, ghostnet)
E2E = [("torchvision:resnet34", "bf16", 64), ("timm:deit_tiny_patch16_224", "bf16", 1),
       ("torchvision:squeezenet1_1", "bf16", 64), ("timm:efficientnet_b2", "fp32", 64),
       ("timm:ghostnet_100", "bf16", 16)]  # fmt: skip
E2E_S = 17.0
"""Seconds one `jouleprof infer` subprocess takes on the H200 (start-up, 1 s idle, build, 6 s)."""
SMOKE_MODELS = [("resnet", "torchvision:resnet18"), ("vit", "timm:vit_tiny_patch16_224")]
SMOKE_PLAN = [("bf16", 1, None), ("fp32", 2, None)]
SMOKE_E2E = [("torchvision:squeezenet1_1", "fp32", 1)]
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


def run_config(model, x, precision, window_s, settle_s, m):
    """One steady window of `jouleprof infer`'s loop inside the open measurement `m`.

    Returns (window, run_pass): run_pass is one more pass (run it inside inference_context)."""
    from jouleprof.bench.infer_loop import inference_context, measurement_edges, steady_window

    now, edge = measurement_edges(m)
    with inference_context(precision, x.device):
        w = steady_window(model, x, precision=precision, window_s=window_s, settle_s=settle_s,
                          now=now, on_edge=edge)  # fmt: skip
    return w, lambda: model(x)


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


def plan(models, tiers, done: set[str], protocol: str = "short"):
    """(family, spec, precision, batch) in PLAN order, each configuration once, none done."""
    out, seen = [], set(done)
    for prec, b, first in tiers:
        for fam, spec in models[:first]:
            cid = config_id(spec, prec, b, protocol)
            if cid not in seen:
                seen.add(cid)
                out.append((fam, spec, prec, b))
    return out


def parse_tiers(text: str) -> list[tuple[str, int, int | None]]:
    """'bf16:1,fp32:64:20' -> [("bf16", 1, None), ("fp32", 64, 20)] (precision:batch[:models])."""
    tiers = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        parts = item.split(":")
        if len(parts) not in (2, 3) or parts[0] not in ("bf16", "fp16", "fp32"):
            raise SystemExit(f"--tiers: {item!r} is not PRECISION:BATCH[:MODELS] (e.g. bf16:1)")
        try:
            nums = [int(x) for x in parts[1:]]
        except ValueError:
            raise SystemExit(f"--tiers: {item!r}: BATCH and MODELS must be integers") from None
        tiers.append((parts[0], nums[0], nums[1] if len(nums) == 2 else None))
    return tiers


def safe_name(spec: str) -> str:
    return spec.replace(":", "_").replace("/", "_")


E2E_COLUMNS = ["spec", "precision", "batch", "status", "rc", "run_dir", "j_per_sample",
               "j_per_sample_lo", "j_per_sample_hi", "s_per_batch", "window_s", "window_passes",
               "power_w", "energy_note", "wall_s", "error"]  # fmt: skip


def jouleprof_cli(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """`jouleprof ARGS` as a user runs it (a fresh interpreter; this checkout's src/ first)."""
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "jouleprof.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s,
                          check=False)  # fmt: skip


def run_e2e(spec: str, precision: str, batch: int, out: Path, sustained_s: float | None) -> dict:
    """`jouleprof infer --protocol steady` in a subprocess: one row of e2e.csv."""
    run_dir = out / "e2e" / f"{safe_name(spec)}__{precision}__b{batch}"
    args = ["infer", "--model", spec, "--batch", str(batch), "--precision", precision,
            "--protocol", "steady", "--out", str(run_dir)]  # fmt: skip
    if sustained_s is not None:
        args += ["--sustained-s", str(sustained_s)]
    row = {"spec": spec, "precision": precision, "batch": batch, "run_dir": str(run_dir.name)}
    t = time.perf_counter()
    try:
        r = jouleprof_cli(args, 120)
        row["rc"] = r.returncode
        if r.returncode != 0:
            row.update(status="error", error=(r.stderr or r.stdout).strip()[-300:])
    except subprocess.TimeoutExpired:
        row.update(status="error", error="timed out after 120 s")
    row["wall_s"] = round(time.perf_counter() - t, 2)
    rec = run_dir / "run.json"
    if rec.exists():
        inf = json.loads(rec.read_text()).get("extra", {}).get("inference") or {}
        if inf:
            row["status"] = row.get("status") or "ok"
            row.update(j_per_sample=inf.get("j_per_clip"), j_per_sample_lo=inf.get("j_per_clip_lo"),
                       j_per_sample_hi=inf.get("j_per_clip_hi"),
                       s_per_batch=inf.get("latency_s_mean"), window_s=inf.get("window_s"),
                       window_passes=inf.get("window_passes"), power_w=inf.get("power_w"),
                       energy_note=inf.get("energy_note"))  # fmt: skip
    row.setdefault("status", "error")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=400.0,
        help="stop starting configurations (and end-to-end runs) after this",
    )
    ap.add_argument("--window-s", type=float, default=1.5, help="measured window per config")
    ap.add_argument(
        "--tiers",
        default=None,
        help="PRECISION:BATCH[:MODELS],... instead of PLAN (e.g. bf16:1 re-measures batch 1); "
        "a --window-s of at least --protocol-s labels the rows protocol 'full'",
    )
    ap.add_argument(
        "--settle-s",
        type=float,
        default=0.0,
        help="synchronized passes after the 3 warm-ups (jouleprof infer: 0)",
    )
    ap.add_argument("--layer-passes", type=int, default=2)
    ap.add_argument(
        "--checks",
        type=int,
        default=len(CHECKS),
        help="how many of CHECKS to re-measure with the full window at the end",
    )
    ap.add_argument("--protocol-s", type=float, default=6.0)
    ap.add_argument(
        "--e2e",
        type=int,
        default=len(E2E),
        help="how many of E2E to measure with `jouleprof infer` at the end",
    )
    ap.add_argument("--ceilings-s", type=float, default=0.8)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run with a simulated GPU")
    args = ap.parse_args(argv)

    import torch

    from jouleprof.bench.infer_loop import inference_context, random_input
    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.types import Span
    from jouleprof.workloads.zoo import resolve

    smoke = args.smoke or not torch.cuda.is_available()
    if smoke and not args.smoke:
        print("no CUDA GPU: running the smoke configuration on the CPU", file=sys.stderr)
    device = "cpu" if smoke else "cuda"
    models, tiers = (SMOKE_MODELS, SMOKE_PLAN) if smoke else (MODELS, PLAN)
    if args.tiers:
        tiers = parse_tiers(args.tiers)
    checks = [] if smoke else CHECKS[: args.checks]
    e2e = (SMOKE_E2E if smoke else E2E)[: args.e2e]
    window_s, protocol_s = (0.2, 0.4) if smoke else (args.window_s, args.protocol_s)
    e2e_s = 8.0 if smoke else E2E_S
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    k = 0
    while (out / f"run_{k:03d}").exists():
        k += 1
    run_name = f"run_{k:03d}"
    meta = _meta(args, out, device)
    meta["run_dir"] = run_name
    meta["loop"] = "jouleprof.bench.infer_loop.steady_window (jouleprof infer --protocol steady)"
    try:
        from jouleprof.predict.features import autocast_cast_counts

        meta["autocast_casts_per_pass"] = autocast_cast_counts(device)
    except Exception as e:  # noqa: BLE001 - a probe, not the collection
        meta["autocast_casts_per_pass"] = f"unavailable: {type(e).__name__}: {e}"
    (out / f"meta_{run_name}.json").write_text(json.dumps(meta, indent=2))
    models_csv = out / "models.csv"
    # the windows' protocol: "full" once they are as long as `jouleprof infer`'s own (>= 6 s)
    main_protocol = "full" if window_s >= protocol_s else "short"
    todo = plan(models, tiers, done_ids(models_csv), main_protocol)
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
                x = random_input(batch, tuple(shape), device)
                w, run_pass = run_config(model, x, prec, win, args.settle_s, m)
                mark(cid, w.t0_s, w.t1_s)
                row.update(status="ok", passes=w.passes, window_s=w.window_s,
                           s_per_pass=w.window_s / w.passes, t0_s=w.t0_s, t1_s=w.t1_s)  # fmt: skip
                if device == "cuda":
                    row["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
                    if protocol == "short" and args.layer_passes > 0:  # layers once, short only
                        sync = torch.cuda.synchronize
                        with inference_context(prec, x.device):
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

        reserve = len(checks) * (protocol_s + 1.5) + len(e2e) * e2e_s
        n_ok = 0
        for i, (fam, spec, prec, b) in enumerate(todo):
            if time.perf_counter() - t_start > args.budget_s - reserve:
                print(f"budget reached after {i} of {len(todo)} configs", flush=True)
                break
            r = one(fam, spec, prec, b, window_s, main_protocol)
            n_ok += r["status"] == "ok"
            print(f"[{time.perf_counter() - t_start:6.1f}s] {r['status']:5s} {r['config_id']} "
                  f"{r.get('s_per_pass', float('nan')) * 1e3:.2f} ms/pass", flush=True)  # fmt: skip
        fams = dict((s_, f) for f, s_ in models)
        for spec, prec, b in checks:
            if time.perf_counter() - t_start > args.budget_s - len(e2e) * e2e_s:
                break
            r = one(fams.get(spec, "check"), spec, prec, b, protocol_s, "full")
            print(f"[{time.perf_counter() - t_start:6.1f}s] {r['status']:5s} {r['config_id']}",
                  flush=True)  # fmt: skip
        cache.clear()
    mrows.close()
    lrows.close()
    if device == "cuda":
        torch.cuda.empty_cache()
    erows = Rows(out / "e2e.csv", E2E_COLUMNS)
    for spec, prec, b in e2e:  # after the collection's measurement is closed: one board reader
        if time.perf_counter() - t_start > args.budget_s:
            print("budget reached before the end-to-end runs were done", flush=True)
            break
        r = run_e2e(spec, prec, b, out, 0.5 if smoke else None)
        erows.write(r)
        print(f"[{time.perf_counter() - t_start:6.1f}s] e2e {r['status']:5s} {spec} {prec} b{b} "
              f"{r.get('j_per_sample')} J/sample (jouleprof infer)", flush=True)  # fmt: skip
    erows.close()
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
