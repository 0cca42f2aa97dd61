"""What each training option a user reaches for costs: V-JEPA2 step options, measured one by one.

Each option (activation checkpointing, fused vs foreach vs default AdamW, gradient accumulation,
data-loader workers, torch.compile) is one `jouleprof profile` run of its own process, in e2e
mode, on the same preset and batch size; the table compares each with the default step:
throughput, GPU energy per sample and peak memory, each with its source from run.json.
Gradient accumulation changes what a step is (batch × accumulation clips per optimizer step),
so it is compared per sample, not per step.

    PYTHONPATH=src python3 benchmarks/options.py --out DIR [--preset vit_huge --batch-size 8]
        [--duration-s 10] [--only default,ckpt,...] [--budget-s 480]

Writes DIR/<option>/ (each run directory), DIR/options.csv and prints the table. Options that
would start after --budget-s are left out and listed as not run (compile goes last: its first
steps take minutes).
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

OPTIONS: dict[str, list[str]] = {
    "default": [],
    "ckpt": ["--activation-checkpointing"],
    "foreach": ["--optimizer-impl", "foreach"],
    "adamw_default": ["--optimizer-impl", "default"],
    "accum2": ["--grad-accum-steps", "2"],
    "workers4": ["--num-workers", "4"],
    "compile": ["--compile"],
}
FIGURES = (
    "throughput_samples_per_s",
    "energy_per_sample_j",
    "peak_mem_allocated_bytes",
    "segment_gpu_power_w",
    "data_wait_pct",
)


def run_option(name: str, extra: list[str], args: argparse.Namespace) -> dict:
    out = args.out / name
    cmd = [
        sys.executable,
        "-m",
        "jouleprof.cli.main",
        "profile",
        "vjepa2",
        "--preset",
        args.preset,
        "--batch-size",
        str(args.batch_size),
        "--mode",
        "e2e",
        "--duration-s",
        str(args.duration_s),
        "--no-report",
        "--out",
        str(out),
    ]
    if "--num-workers" not in extra:
        cmd += ["--num-workers", str(args.workers)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        # Ctrl-C, so that the run directory is closed and readable, then whatever it printed.
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    row: dict = {"option": name, "args": " ".join(extra), "wall_s": time.perf_counter() - t0}
    # TORCH_LOGS=recompiles output (why torch.compile compiled again) lands in stderr: keep it.
    (args.out / f"{name}.log").write_text(stdout[-20000:] + stderr[-200000:])
    if timed_out:
        row["error"] = f"stopped after --timeout-s {args.timeout_s:g} s"
        return row
    if proc.returncode != 0 or not (out / "run.json").is_file():
        row["error"] = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        return row
    record = json.loads((out / "run.json").read_text())
    graphs = record.get("extra", {}).get("compiled_graphs") or {}
    row["compiled_graphs_warmup"] = graphs.get("warmup")
    row["compiled_graphs_measured"] = graphs.get("measured")
    summary = record["summary"]
    for key in FIGURES:
        fig = summary.get(key) or {}
        row[key] = fig.get("value")
        row[f"{key}_source"] = (
            fig.get("source") if fig.get("value") is not None else fig.get("reason")
        )
    return row


def relative(rows: list[dict]) -> None:
    base = next((r for r in rows if r["option"] == "default" and "error" not in r), None)
    for r in rows:
        for key in ("throughput_samples_per_s", "energy_per_sample_j", "peak_mem_allocated_bytes"):
            v, b = r.get(key), base.get(key) if base else None
            r[f"{key}_vs_default_pct"] = 100 * (v - b) / b if v is not None and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="vit_huge")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--only", default=",".join(OPTIONS), help="comma-separated option names")
    ap.add_argument("--budget-s", type=float, default=float("inf"))
    ap.add_argument(
        "--timeout-s", type=float, default=None, help="stop one option's run after this long"
    )
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in OPTIONS]
    if unknown:
        ap.error(f"unknown option(s) {unknown}: choose from {', '.join(OPTIONS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    rows: list[dict] = []
    for name in names:
        if time.perf_counter() - t_start > args.budget_s:
            rows.append(
                {"option": name, "args": " ".join(OPTIONS[name]), "error": "not run: budget"}
            )
            continue
        rows.append(run_option(name, OPTIONS[name], args))
        r = rows[-1]
        print(
            f"{name:14s} "
            + (
                f"error: {r['error']}"
                if "error" in r
                else f"{r['throughput_samples_per_s']:.2f} samples/s  "
                f"{r['energy_per_sample_j'] or float('nan'):.2f} J/sample  "
                f"{(r['peak_mem_allocated_bytes'] or 0) / 2**30:.1f} GiB  ({r['wall_s']:.0f} s)"
            ),
            flush=True,
        )
    relative(rows)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(args.out / "options.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"table: {args.out / 'options.csv'}")


if __name__ == "__main__":
    main()
