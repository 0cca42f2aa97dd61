"""GPU run of issue 15's targets: the video classifiers' deployment cost and the feasibility probe.

    PYTHONPATH=src python benchmarks/video_probe.py --out $OUT/vp --budget-s 520 \
        --stages infer,probe --batch-sizes 4 --timed-s 3

Stages:
- infer: `jouleprof infer` of each model (batch 1, bf16, protocol clip: 30 synchronized latency
  passes, a 10 s sustained loop for energy), each in its own process, into OUT/infer/<model>/;
  OUT/infer.csv.
- probe: `jouleprof probe video` over models × methods × precisions × batch sizes, full
  fine-tuning also with activation checkpointing, most informative cells first, into
  OUT/probe/probe.csv (resumable; `--done CSV` marks the rows of an earlier call as done).

Stops starting new work after --budget-s. Writes OUT/meta.json (date, commit from $JP_COMMIT or
git, GPU, driver, versions, the command) and prints a short table. --smoke: tiny models, short
windows (CPU check).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MODELS = ("videomae-b", "timesformer-b", "swin3d-b", "hiera-b")
INFER_COLS = (
    "model",
    "status",
    "batch",
    "latency_s_mean",
    "latency_s_p50",
    "latency_s_p95",
    "latency_passes",
    "window_s",
    "window_passes",
    "j_per_clip",
    "j_per_clip_lo",
    "j_per_clip_hi",
    "power_w",
    "peak_mem_mib",
    "energy_note",
    "error",
)
"""infer.csv's columns: the inference figures sit between status and error."""


def _version(mod: str) -> str | None:
    try:
        m = __import__(mod)
    except Exception as e:  # missing wheels are reported, not fatal
        return f"missing ({type(e).__name__})"
    return getattr(m, "__version__", "present")


def meta(args, argv) -> dict:
    commit = os.environ.get("JP_COMMIT")
    if not commit:
        try:
            commit = (
                subprocess.run(
                    ["git", "rev-parse", "HEAD"],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout.strip()
                or None
            )
        except Exception:
            commit = None
    gpu = {"name": None, "driver": None}
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        gpu = {
            "name": pynvml.nvmlDeviceGetName(h),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
        }
    except Exception as e:
        gpu["reason"] = f"{type(e).__name__}: {e}"
    return {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "gpu": gpu,
        "python": sys.version.split()[0],
        "versions": {
            m: _version(m)
            for m in ("torch", "torchvision", "transformers", "peft", "bitsandbytes", "hiera")
        },
        "command": " ".join([sys.executable, *argv]),
        "args": vars(args),
    }


def stage_infer(args, out: Path, deadline: float) -> list[dict]:
    rows = []
    for model in args.infer_models or args.models:
        d = out / "infer" / model
        rj = d / "run.json"
        if rj.exists() and "inference" in json.loads(rj.read_text()).get("extra", {}):
            res = json.loads(rj.read_text())["extra"]["inference"]
        elif time.monotonic() > deadline:
            print(f"infer {model}: budget spent, skipped", flush=True)
            continue
        else:
            if d.exists():
                shutil.move(str(d), str(d.with_name(f"{model}.attempt{int(time.time())}")))
            cmd = [
                sys.executable,
                "-m",
                "jouleprof.cli.main",
                "infer",
                "--model",
                model,
                "--batch",
                "1",
                "--precision",
                "bf16",
                "--protocol",
                "clip",
                "--out",
                str(d),
            ]
            if args.smoke:
                cmd += ["--tiny", "--sustained-s", "1", "--passes", "3"]
            # Keep the caller's PYTHONPATH (wheels carried there, e.g. hiera) after src.
            pp = os.environ.get("PYTHONPATH")
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + (os.pathsep + pp if pp else "")}
            d.parent.mkdir(parents=True, exist_ok=True)
            with (out / "infer" / f"{model}.log").open("w") as f:
                p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=300)
            if p.returncode != 0 or not rj.exists():
                tail = (out / "infer" / f"{model}.log").read_text(errors="replace")[-400:]
                rows.append({"model": model, "status": "error", "error": tail.replace("\n", " ")})
                continue
            res = json.loads(rj.read_text())["extra"].get("inference") or {}
        rows.append(
            {
                "model": model,
                "status": "ok",
                **{k: res.get(k) for k in INFER_COLS[2:-1]},
            }
        )
        print(f"infer {model}: {rows[-1]}", flush=True)
    with (out / "infer.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=INFER_COLS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return rows


def stage_probe(args, out: Path, deadline: float) -> dict:
    from jouleprof.bench.probe import PROBE_CSV, ProbeSpec, append_row, read_rows, run_probe

    pdir = out / "probe"
    pdir.mkdir(parents=True, exist_ok=True)
    if args.done:  # rows of an earlier call count as done here
        have = {
            tuple(r[k] for k in ("model", "method", "precision", "checkpointing", "batch"))
            for r in read_rows(pdir / PROBE_CSV)
        }
        for r in read_rows(Path(args.done)):
            if r["status"] == "error":
                continue  # an error row is a bug to run again, not a result
            if (
                tuple(r[k] for k in ("model", "method", "precision", "checkpointing", "batch"))
                not in have
            ):
                append_row(pdir / PROBE_CSV, {**r, "checkpointing": r["checkpointing"] == "on"})
    spec = ProbeSpec(
        models=tuple(args.models),
        methods=tuple(args.methods),
        precisions=tuple(args.precisions),
        batch_sizes=tuple(args.batch_sizes),
        checkpointing=(False, True),
        checkpointing_methods=("full",),
        timed_s=args.timed_s,
        warmup_steps=3,
        tiny=args.smoke,
        cells_per_process=args.cells_per_process,
        cell_timeout_s=args.cell_timeout_s,
        share_builds=not args.no_share_builds,
    )

    def on_row(r):
        print(
            f"probe {r['model']:>13s} {r['method']:>7s} {r['precision']:>4s} "
            f"{'ckpt' if r['checkpointing'] else '    '} b{r['batch']} {r['status']:>7s} "
            f"{r.get('s_per_step') or ''} {r.get('j_per_step') or ''} "
            f"{r.get('peak_mem_mib') or ''} "
            f"{r.get('error') or ''}",
            flush=True,
        )

    return run_probe(spec, pdir, budget_s=max(0.0, deadline - time.monotonic()), on_row=on_row)


def table(out: Path) -> None:
    from jouleprof.bench.probe import read_rows

    rows = read_rows(out / "probe" / "probe.csv")
    print("\nprobe (ok rows: s/step, J/step [lo, hi], peak MiB)")
    for r in rows:
        if r["status"] == "ok":
            j = (
                f"{float(r['j_per_step']):8.1f} [{float(r['j_per_step_lo']):.1f}, "
                f"{float(r['j_per_step_hi']):.1f}]"
                if r["j_per_step"]
                else "   n/a"
            )
            mem = f"{float(r['peak_mem_mib']):8.0f}" if r["peak_mem_mib"] else "   n/a"
            print(
                f"{r['model']:>13s} {r['method']:>7s} {r['precision']:>4s} "
                f"{r['checkpointing']:>3s} "
                f"b{r['batch']:<2s} {float(r['s_per_step']):7.3f} {j} {mem}"
            )
    by = {}
    for r in rows:
        by[r["status"]] = by.get(r["status"], 0) + 1
    print("statuses:", by)
    for r in rows:
        if r["status"] in ("error", "oom"):
            print(
                f"  {r['status']}: {r['model']} {r['method']} {r['precision']} "
                f"{r['checkpointing']} b{r['batch']}: {r['error'][:200]}"
            )
    if (out / "infer.csv").exists():
        print("\ninfer:")
        print((out / "infer.csv").read_text())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=520.0)
    ap.add_argument("--stages", default="infer,probe")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--methods", default="full,lora,qlora,adalora,bitfit")
    ap.add_argument("--precisions", default="fp32,fp16,bf16,int8")
    ap.add_argument(
        "--infer-models", default="", help="models of the infer stage (default: --models)"
    )
    ap.add_argument("--batch-sizes", default="4")
    ap.add_argument("--timed-s", type=float, default=5.0)  # the protocol: ≥ 5 s
    ap.add_argument("--cells-per-process", type=int, default=12)
    ap.add_argument(
        "--no-share-builds",
        action="store_true",
        help="build every cell's model afresh (default: batch sizes of one build share it)",
    )
    ap.add_argument("--cell-timeout-s", type=float, default=150.0)
    ap.add_argument("--done", default=None, help="probe.csv of an earlier call: its rows are done")
    ap.add_argument("--smoke", action="store_true", help="tiny models, short windows (CPU)")
    args = ap.parse_args(argv)
    for k in ("models", "methods", "precisions", "infer_models"):
        setattr(args, k, [x for x in getattr(args, k).split(",") if x])
    args.batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    if args.smoke:
        args.timed_s = min(args.timed_s, 0.5)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    m = meta(args, [__file__, *argv])
    (out / "meta.json").write_text(json.dumps(m, indent=1, default=str))
    print(json.dumps(m["versions"]), m["gpu"], flush=True)
    stages = [s for s in args.stages.split(",") if s]
    if "infer" in stages:
        stage_infer(args, out, deadline)
    if "probe" in stages:
        counts = stage_probe(args, out, deadline)
        print("probe counts:", counts, flush=True)
    m["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "meta.json").write_text(json.dumps(m, indent=1, default=str))
    table(out)
    return 0


if __name__ == "__main__":
    from jouleprof.interrupts import terminate_as_interrupt

    terminate_as_interrupt()  # `timeout` stops the cells too, and records them
    sys.exit(main())
