"""BERT masked-LM sweep on one GPU for the training-energy scaling law (budgeted, resumable).

Every configuration runs the protocol of `jouleprof.workloads.bert_protocol` (5 warm-up steps,
synced steps for ≥ 6 s, whole-board energy from the counter, peak memory) into
OUT/runs/<id>/, and a row lands in OUT/results.csv as soon as it is done.

Isolation: one worker process loops over the configurations (importing torch and transformers
and initializing CUDA once: ~6-10 s that a process per configuration would pay ~30 times out of
a 6-minute budget); between configurations it drops every reference, collects garbage and
empties the CUDA cache, and resets the peak-memory counter. An out-of-memory result is a row
and the worker goes on; a worker that dies (a CUDA error poisons the context) marks the
configuration it was on as failed and a fresh worker takes the rest. Configurations are ordered
by what they teach the law (the base point, the held-out largest model, one axis at a time,
then mixed points), so a budget cut drops the least informative; rerunning the same command
resumes.

    PYTHONPATH=src python benchmarks/bert_sweep.py --out /tmp/bert_sweep --budget-s 400
    PYTHONPATH=src python benchmarks/bert_sweep.py --smoke --out /tmp/bs   # CPU, simulated GPU
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

FIELDS = ("layers", "hidden", "heads", "seq", "batch")
COLUMNS = (
    "id",
    "order",
    "role",
    *FIELDS,
    "strategy",
    "status",
    "steps",
    "s_per_step",
    "j_per_step",
    "j_per_sample",
    "avg_power_w",
    "energy_j",
    "wall_time_s",
    "peak_mem_allocated_bytes",
    "train_flops_per_step",
    "params",
    "seconds_total",
    "error",
)


def _c(layers, hidden, heads, seq, batch, role):
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "seq": seq,
        "batch": batch,
        "role": role,
    }


def plan() -> list[dict]:
    """The configurations, most informative first. The largest model (L24 H1024 A16, 335 M
    parameters) appears only in rows of role 'holdout'; every other row is smaller."""
    base = (12, 768, 12, 128, 32)
    rows = [_c(*base, "base")]
    rows += [_c(24, 1024, 16, 512, 32, "holdout"), _c(24, 1024, 16, 128, 32, "holdout")]
    for L in (2, 6, 18, 4):
        rows.append(_c(L, 768, 12, 128, 32, "axis-layers"))
    for H, A in ((256, 4), (512, 8), (1024, 16)):
        rows.append(_c(12, H, A, 128, 32, "axis-hidden"))
    for S in (64, 256, 512):
        rows.append(_c(12, 768, 12, S, 32, "axis-seq"))
    for B in (8, 16, 64, 128):
        rows.append(_c(12, 768, 12, 128, B, "axis-batch"))
    for A in (4, 8, 16):
        rows.append(_c(12, 768, A, 128, 32, "axis-heads"))
    mixed = [
        (6, 512, 8, 256, 16),
        (4, 1024, 16, 64, 64),
        (18, 512, 8, 512, 8),
        (8, 1536, 24, 128, 16),
        (24, 256, 4, 256, 64),
        (2, 768, 12, 512, 128),
        (16, 1024, 16, 256, 16),
        (8, 384, 6, 1024, 8),
        (10, 640, 10, 192, 48),
        (20, 896, 14, 128, 24),
        (3, 1280, 20, 384, 24),
        (14, 512, 16, 64, 96),
    ]
    rows += [_c(*m, "mixed") for m in mixed]
    rows += [_c(24, 1024, 16, 256, 16, "holdout"), _c(*base, "repeat")]
    for strategy in ("ddp", "fsdp", "tp"):  # each wrapper's own cost on one GPU (world size 1)
        rows.append({**_c(*base, "strategy-1gpu"), "strategy": strategy})
    # added after the first call (appended, so earlier ids stay): compute-bound rows at large
    # hidden sizes (all smaller than the held-out model) and repeats for the repeatability floor
    rows += [
        _c(12, 1024, 16, 512, 32, "compute"),
        _c(6, 1536, 24, 512, 16, "compute"),
        _c(4, 2048, 32, 256, 32, "compute"),
        _c(8, 1280, 20, 512, 32, "compute"),
        _c(24, 1024, 16, 512, 32, "repeat"),
        _c(12, 768, 12, 512, 32, "repeat"),
    ]
    for i, r in enumerate(rows):
        r["order"] = i
        r.setdefault("strategy", "none")
        r["id"] = f"{i:02d}-L{r['layers']}-H{r['hidden']}-A{r['heads']}-S{r['seq']}-B{r['batch']}"
        if r["strategy"] != "none":
            r["id"] += f"-{r['strategy']}"
    return rows


# The order configurations run in (by plan index; the rest follow in plan order): what the law
# lacks first (compute-bound large hidden sizes, the third held-out point), then the one-GPU
# strategy rows and the repeats, then the small mixed points.
RUN_FIRST = (21, 37, 23, 38, 26, 32, 39, 40, 30, 29, 34, 35, 36, 41, 33, 42)


def run_order(rows: list[dict]) -> list[dict]:
    """`rows` in the order they run: RUN_FIRST's indices, then the others in plan order."""
    by_order = {r["order"]: r for r in rows}
    first = [by_order[i] for i in RUN_FIRST if i in by_order]
    return first + [r for r in rows if r["order"] not in RUN_FIRST]


def smoke_plan() -> list[dict]:
    rows = [
        _c(2, 64, 4, 32, 4, "base"),
        _c(2, 64, 4, 32, 8, "axis-batch"),
        _c(4, 64, 4, 32, 4, "holdout"),
    ]
    for i, r in enumerate(rows):
        r["order"] = i
        r["strategy"] = "ddp" if i == 1 else "none"
        r["id"] = f"{i:02d}-smoke-L{r['layers']}-B{r['batch']}-{r['strategy']}"
    return rows


def _done_ids(out: Path) -> set[str]:
    p = out / "results.csv"
    if not p.exists():
        return set()
    with p.open() as f:
        return {r["id"] for r in csv.DictReader(f) if r["status"] in ("complete", "oom", "failed")}


def _append(out: Path, row: dict, columns: tuple[str, ...] = COLUMNS) -> None:
    p = out / "results.csv"
    new = not p.exists()
    with p.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({k: row.get(k, "") for k in columns})


def _row_from_run(cfg_row: dict, run_dir: Path, seconds: float) -> dict:
    rec = json.loads((run_dir / "run.json").read_text())
    s = {k: v.get("value") for k, v in rec.get("summary", {}).items()}
    row = {**cfg_row, "seconds_total": round(seconds, 2)}
    if rec["extra"].get("oom"):
        row["status"] = "oom"
        row["error"] = (rec.get("notes") or [""])[-1][:200]
        return row
    row["status"] = rec["status"]
    for k in COLUMNS:
        if k in s and s[k] is not None:
            row[k] = s[k]
    row["params"] = rec["extra"].get("bert", {}).get("parameters", {}).get("total", "")
    return row


def worker(args) -> int:
    """Run pending configurations in this process until the deadline."""
    import torch

    from jouleprof.workloads.bert import BertTrainConfig
    from jouleprof.workloads.bert_protocol import run_protocol

    out = Path(args.out)
    rows = smoke_plan() if args.smoke else run_order(plan())
    done = _done_ids(out)
    deadline = args.deadline
    for r in rows:
        if r["id"] in done:
            continue
        if time.time() + args.est_s > deadline:
            print(f"budget: stopping before {r['id']}", flush=True)
            return 0
        (out / "current.txt").write_text(r["id"])
        t0 = time.time()
        run_dir = out / "runs" / r["id"]
        if (run_dir / "run.json").exists():  # a half-run left by a killed worker: start over
            import shutil

            shutil.rmtree(run_dir)
        kw = {k: r[k] for k in (*FIELDS, "strategy")}
        if args.smoke:
            kw.update(precision="fp32", min_measure_s=0.5, min_steps=2, warmup_steps=1)
        else:
            kw.update(min_measure_s=args.measure_s)
        try:
            cfg = BertTrainConfig(**kw)
            run_protocol(cfg, run_dir, simulate_gpu_w=300.0 if args.smoke else None)
            row = _row_from_run(r, run_dir, time.time() - t0)
        except Exception as e:  # a bad configuration is a row, never the end of the sweep
            row = {
                **r,
                "status": "failed",
                "error": f"{type(e).__name__}: {e}"[:300],
                "seconds_total": round(time.time() - t0, 2),
            }
        _append(out, row)
        (out / "current.txt").unlink(missing_ok=True)  # between configurations: none in flight
        print(
            f"{r['id']:>34s}  {row['status']:>8s}  {row.get('j_per_step', '')!s:>10.8s} J/step"
            f"  {time.time() - t0:5.1f} s",
            flush=True,
        )
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    (out / "current.txt").unlink(missing_ok=True)
    return 0


PENDING_COLUMNS = (
    "id",
    "role",
    *FIELDS,
    "strategy",
    "j_per_step",
    "j_per_step_lo",
    "j_per_step_hi",
    "s_per_step",
    "s_per_step_lo",
    "s_per_step_hi",
)


def predict_pending(out: Path) -> int:
    """The shipped law's predictions for the planned configurations not measured yet, written
    before they are measured (a blind test of the law for the next call)."""
    from jouleprof.predict.train_laws import get_law
    from jouleprof.predict.train_multi import predict_config
    from jouleprof.workloads.bert import BertTrainConfig

    law = get_law("bert", "h200", "bf16")
    done = _done_ids(out)
    rows = [r for r in run_order(plan()) if r["id"] not in done]
    with (out / "predictions_pending.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=PENDING_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            cfg = BertTrainConfig(**{k: r[k] for k in FIELDS}, strategy=r["strategy"])
            pred = predict_config(law, cfg, 1, r["strategy"])
            w.writerow({**r, **{k: f"{pred[k]:.6g}" for k in PENDING_COLUMNS[8:]}})
    print(f"{len(rows)} pending configurations predicted: {out / 'predictions_pending.csv'}")
    return 0


def _meta(out: Path, argv: list[str]) -> None:
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    command = ["python", "benchmarks/bert_sweep.py", *argv]
    write_meta(out, benchmark_meta(command, ("transformers",), ROOT), keep_calls=True)


def _table(out: Path) -> None:
    p = out / "results.csv"
    if not p.exists():
        print("no results")
        return
    with p.open() as f:
        rows = list(csv.DictReader(f))
    print(f"{'id':>34s} {'status':>8s} {'s/step':>8s} {'J/step':>9s} {'W':>6s} {'mem GiB':>8s}")
    for r in rows:

        def num(k, fmt, r=r):
            try:
                return format(float(r[k]), fmt)
            except (TypeError, ValueError):
                return "-"

        mem = num("peak_mem_allocated_bytes", ".0f")
        mem = f"{float(mem) / 2**30:.1f}" if mem != "-" else "-"
        print(
            f"{r['id']:>34s} {r['status']:>8s} {num('s_per_step', '8.4f')} "
            f"{num('j_per_step', '9.2f')} {num('avg_power_w', '6.0f')} {mem:>8s}"
        )


def _supervise(cmd: list[str], cur: Path, timeout_s: float) -> int:
    """Run the worker; kill it when one configuration runs past timeout_s (a hang)."""
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    while True:
        try:
            return proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        try:
            age = time.time() - cur.stat().st_mtime
        except FileNotFoundError:
            continue
        if age > timeout_s:
            print(
                f"configuration {cur.read_text().strip()} ran past {timeout_s:.0f} s: killing",
                flush=True,
            )
            proc.kill()
            return proc.wait()


def run_jobs(
    make_cmd: Callable[[int], list[str]],
    out: Path,
    rows_by_id: dict[str, dict],
    timeout_s: float,
    deadline: float,
    est_s: float,
    *,
    supervise: Callable[[list[str], Path, float], int] = _supervise,
    what: str = "worker",
    columns: tuple[str, ...] = COLUMNS,
) -> None:
    """Start worker jobs (`make_cmd(attempt)`, run by `supervise`) until one ends outside any
    configuration or the budget is spent. A job that dies inside a configuration (it leaves
    out/current.txt) has that configuration recorded as failed, and the next job takes the
    rest."""
    cur = out / "current.txt"
    for attempt in range(10):
        rc = supervise(make_cmd(attempt), cur, timeout_s)
        if not cur.exists():
            if rc != 0:
                print(f"{what} exited {rc} outside any configuration: stopping", flush=True)
            return
        cid = cur.read_text().strip()
        failed = {"status": "failed", "error": f"{what} exited with {rc} during this configuration"}
        _append(out, {**rows_by_id.get(cid, {"id": cid}), **failed}, columns)
        cur.unlink()
        print(f"{what} exited {rc} in {cid}: recorded as failed, restarting", flush=True)
        if time.time() + est_s > deadline:
            return


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=400.0,
        help="start no configuration after this many seconds (rerun to resume)",
    )
    ap.add_argument("--measure-s", type=float, default=6.0, help="measured seconds per config")
    ap.add_argument(
        "--est-s",
        type=float,
        default=10.0,
        help="expected seconds per configuration (a budget's last one must fit)",
    )
    ap.add_argument(
        "--config-timeout-s",
        type=float,
        default=90.0,
        help="kill a configuration that runs longer than this (a hang)",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny configs on CPU, simulated GPU")
    ap.add_argument(
        "--predict-pending",
        action="store_true",
        help="no GPU: write OUT/predictions_pending.csv, the shipped law's prediction (with its "
        "interval) for every planned configuration results.csv does not hold yet, and stop",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        return worker(args)
    if args.predict_pending:
        return predict_pending(out)
    t_start = time.time()
    deadline = t_start + args.budget_s
    _meta(out, argv)
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", "--deadline",
           repr(deadline)]  # fmt: skip
    run_jobs(
        lambda _attempt: cmd,
        out,
        {r["id"]: r for r in (smoke_plan() if args.smoke else plan())},
        args.config_timeout_s,
        deadline,
        args.est_s,
    )
    _table(out)
    print(f"sweep: {time.time() - t_start:.0f} s; results in {out / 'results.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
