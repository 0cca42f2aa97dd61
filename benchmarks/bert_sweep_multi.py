"""BERT masked-LM sweep on several GPUs of one host: DDP, FSDP2 and tensor parallelism, for the
training-energy law's several-GPU factor (budgeted, resumable), and its evaluation.

Every configuration runs `jouleprof.workloads.bert_protocol` on every GPU (5 warm-up steps,
synced steps for ≥ 6 s, each rank measuring its own GPU, rank 0 writing the reduced run) into
OUT/runs/<id>/, and a row lands in OUT/results.csv (the one-GPU sweep's columns plus `gpus`) as
soon as it is done. One torchrun job loops over the configurations (imports, CUDA and NCCL set
up once) on one process group; the ranks agree before each configuration whether the budget
allows it. A job that dies inside a configuration marks it failed and a fresh job takes the
rest; one past --config-timeout-s is killed. Rerunning the same command resumes.

    PYTHONPATH=src python3 benchmarks/bert_sweep_multi.py --gpus 2 --out OUT --budget-s 480
    PYTHONPATH=src python3 benchmarks/bert_sweep_multi.py --gpus 2 --smoke --out /tmp/bm  # CPU
    PYTHONPATH=src python3 benchmarks/bert_sweep_multi.py --evaluate OUT2 OUT4 --out EVAL

--smoke runs tiny configurations on the CPU (gloo, each rank measuring a simulated 300 W GPU).
--evaluate fits the factor on the rows of the named sweeps and judges it on rows it left out
(`jouleprof.predict.train_multi_fit.evaluate`): EVAL/accuracy.json and accuracy.md, and
EVAL/law_multi_gpu.json, the factor as `TrainLaw.multi_gpu` (for predict.train_laws.LAWS).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


sys.path.insert(0, str(Path(__file__).resolve().parent))

import bert_sweep as BS  # noqa: E402  (the one-GPU sweep: its rows, columns and job loop)

FIELDS = BS.FIELDS
COLUMNS = (*BS.COLUMNS[:3], "gpus", *BS.COLUMNS[3:])
STRATEGIES = ("ddp", "fsdp", "tp")
CONFIGS = (
    ((12, 768, 12, 128, 32), "base"),
    ((12, 768, 16, 128, 32), "base-16-heads"),
    ((6, 768, 16, 128, 32), "axis-layers"),
    ((24, 768, 16, 128, 32), "axis-layers"),
    ((12, 1024, 16, 128, 32), "axis-hidden"),
    ((12, 512, 16, 128, 32), "axis-hidden"),
    ((12, 768, 16, 512, 32), "axis-seq"),
    ((12, 768, 16, 128, 8), "axis-batch"),
    ((12, 768, 16, 128, 128), "axis-batch"),
    ((4, 2048, 32, 256, 32), "compute"),
    ((24, 1024, 16, 512, 32), "large"),
)
"""Per-GPU configurations (layers, hidden, heads, seq, batch): the one-GPU sweep's base, then one
axis at a time (heads 16 so that tensor parallelism divides them over 2, 4 and 8 GPUs); each
runs under every strategy before the next configuration starts, so a budget cut keeps whole
configurations."""
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""NVLink multicast off (the lent multi-GPU hosts ask for it: a program using it can put a shared
host's GPUs out of service); set unless the environment already says."""
SMOKE_CONFIGS = (((2, 64, 4, 32, 4), "base"), ((2, 64, 4, 32, 8), "axis-batch"))


def plan(gpus: int, smoke: bool = False) -> tuple[list[dict], list[dict]]:
    """(rows to run, rows left out with the reason): every configuration × strategy."""
    rows, left_out = [], []
    for i, ((L, H, A, S, B), role) in enumerate(SMOKE_CONFIGS if smoke else CONFIGS):
        for strategy in STRATEGIES:
            r = {
                "layers": L,
                "hidden": H,
                "heads": A,
                "seq": S,
                "batch": B,
                "role": role,
                "strategy": strategy,
                "gpus": gpus,
                "order": len(rows),
                "id": f"{i:02d}-N{gpus}-L{L}-H{H}-A{A}-S{S}-B{B}-{strategy}",
            }
            if strategy == "tp" and (H % gpus or A % gpus):
                left_out.append({**r, "reason": f"hidden {H} or heads {A} not divisible by {gpus}"})
                continue
            rows.append(r)
    return rows, left_out


def worker(args) -> int:
    """Under torchrun: every rank loops over the pending configurations on one process group;
    rank 0 decides whether the budget allows the next one and writes the rows."""
    import torch
    import torch.distributed as dist

    from jouleprof.distributed import context as dctx
    from jouleprof.workloads.bert import BertTrainConfig
    from jouleprof.workloads.bert_protocol import run_protocol

    out = Path(args.out)
    ctx = dctx.current()
    if ctx is None or ctx.world_size != args.gpus:
        print(f"the worker runs under torchrun with {args.gpus} processes", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available() and not args.smoke
    kw_pg = {}
    if cuda:
        from jouleprof.distributed.context import rank_gpu

        idx = rank_gpu(ctx, torch.cuda.device_count())
        torch.cuda.set_device(idx)
        kw_pg["device_id"] = torch.device("cuda", idx)
    dist.init_process_group("nccl" if cuda else "gloo", **kw_pg)
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else None
    main = ctx.is_main
    rows, _ = plan(args.gpus, args.smoke)
    done = BS._done_ids(out)
    try:
        for r in rows:
            if r["id"] in done:
                continue
            go = torch.tensor(
                [1.0 if time.time() + args.est_s <= args.deadline else 0.0], device=dev
            )
            dist.all_reduce(go, op=dist.ReduceOp.MIN)  # rank 0's clock decides for all
            if go.item() < 1.0:
                if main:
                    print(f"budget: stopping before {r['id']}", flush=True)
                return 0
            if main:
                (out / "current.txt").write_text(r["id"])
            t0 = time.time()
            run_dir = out / "runs" / r["id"]
            kw = {k: r[k] for k in (*FIELDS, "strategy")}
            if args.smoke:
                kw.update(precision="fp32", min_measure_s=0.5, min_steps=2, warmup_steps=1)
            else:
                kw.update(min_measure_s=args.measure_s)
            try:
                run_protocol(
                    BertTrainConfig(**kw), run_dir, simulate_gpu_w=300.0 if args.smoke else None
                )
                row = BS._row_from_run(r, run_dir, time.time() - t0) if main else None
            except Exception as e:  # a refused configuration is a row (raised on every rank)
                row = {
                    **r,
                    "status": "failed",
                    "error": f"{type(e).__name__}: {e}"[:300],
                    "seconds_total": round(time.time() - t0, 2),
                }
            if main:
                BS._append(out, row, COLUMNS)
                (out / "current.txt").unlink(missing_ok=True)
                print(
                    f"{r['id']:>44s}  {row['status']:>8s}  {row.get('j_per_step', '')!s:>10.8s}"
                    f" J/step  {time.time() - t0:5.1f} s",
                    flush=True,
                )
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def _stop_group(proc, grace_s: float) -> int:
    """SIGTERM to the job's process group, SIGKILL to what is left after `grace_s`."""
    import signal
    import subprocess

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):  # ranks that outlived it, or itself
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def supervise_group(cmd: list[str], cur: Path, timeout_s: float, grace_s: float = 10.0) -> int:
    """Run a torchrun job in its own process group; when one configuration runs past
    `timeout_s` (`cur` unchanged that long), or on Ctrl-C, stop the whole group: torchrun and
    every rank it started, which would otherwise hold their GPUs."""
    import subprocess

    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        while True:
            try:
                return proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            try:
                age = time.time() - cur.stat().st_mtime
            except FileNotFoundError:
                continue
            if age > timeout_s:
                print(
                    f"configuration {cur.read_text().strip()} ran past {timeout_s:.0f} s: "
                    "stopping the job",
                    flush=True,
                )
                return _stop_group(proc, grace_s)
    except KeyboardInterrupt:  # the job is in its own session: Ctrl-C reaches only this process
        _stop_group(proc, grace_s)
        raise


def run(args, argv: list[str]) -> int:
    """Supervise torchrun jobs until every configuration has a row or the budget is spent."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    out = Path(args.out)
    t_start = time.time()
    deadline = t_start + args.budget_s
    command = ["python3", "benchmarks/bert_sweep_multi.py", *argv]
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    write_meta(out, benchmark_meta(command, ("transformers",), ROOT), keep_calls=True)
    rows, left_out = plan(args.gpus, args.smoke)
    (out / "left_out.json").write_text(json.dumps(left_out, indent=1) + "\n")
    port = 29500 + os.getpid() % 400
    worker_argv = [str(Path(__file__).resolve()), *argv, "--worker", "--deadline", repr(deadline)]
    BS.run_jobs(
        lambda attempt: [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                         str(args.gpus), "--master-port", str(port + attempt), *worker_argv],
        out,
        {r["id"]: r for r in rows},
        args.config_timeout_s,
        deadline,
        args.est_s,
        supervise=supervise_group,
        what="torchrun",
        columns=COLUMNS,
    )  # fmt: skip
    done = BS._done_ids(out)
    print(
        f"sweep on {args.gpus} GPUs: {time.time() - t_start:.0f} s; "
        f"{len([r for r in rows if r['id'] in done])} of {len(rows)} configurations have a row "
        f"({len(left_out)} left out: left_out.json); results in {out / 'results.csv'}"
    )
    return 0


def load_rows(sweeps: list[Path]) -> list:
    """The complete rows of several-GPU sweeps as train_multi_fit.MultiRow."""
    from jouleprof.predict.train_multi_fit import MultiRow
    from jouleprof.workloads.bert import BertTrainConfig

    rows = []
    for d in sweeps:
        with (d / "results.csv").open() as f:
            for r in csv.DictReader(f):
                if r["status"] != "complete" or int(r["gpus"]) < 2:
                    continue
                cfg = BertTrainConfig(
                    **{k: int(r[k]) for k in FIELDS}, strategy=r["strategy"], precision="bf16"
                )
                rows.append(
                    MultiRow(
                        r["id"], cfg, int(r["gpus"]), float(r["s_per_step"]), float(r["j_per_step"])
                    )
                )
    return rows


def _md(ev: dict) -> str:
    lines = ["# Several-GPU factor: accuracy on rows the fit left out", ""]
    lines += ["| strategy | o (time ratio) | β (ns/MB) | effective link (GB/s) | rows | GPUs |"]
    lines += ["|---|---|---|---|---|---|"]
    for s, f in ev["fit_all"].items():
        link = f["effective_link_gb_s"]
        lines.append(
            f"| {s} | {f['time_ratio']:.3f} | {f['s_per_byte'] * 1e15:.3g} | "
            f"{'n/a' if link is None else f'{link:.3g}'} | {len(f['rows'])} | "
            f"{','.join(map(str, f['gpus']))} |"
        )
    lines += [
        "",
        "| split | n | fitted MAPE J (worst) | ideal scaling | datasheet | fitted MAPE s |",
    ]
    lines += ["|---|---|---|---|---|---|"]
    splits = {
        **{f"leave one out, {k} GPUs": v for k, v in ev["leave_one_out_within_count"].items()},
        **{
            k.replace("_from_", " GPUs from ") + " GPUs": v
            for k, v in ev["larger_from_smaller"].items()
        },
    }
    for name, v in splits.items():
        if not v.get("fitted"):
            lines.append(f"| {name} | 0 | not predicted: {', '.join(v['not_predicted'])} | | | |")
            continue
        f, i, d = v["fitted"], v["ideal_scaling"], v["datasheet"]
        lines.append(
            f"| {name} | {f['n']} | {f['mape_j_pct']:.1f} % ({f['worst_j_pct']:+.1f} %) | "
            f"{i['mape_j_pct']:.1f} % ({i['worst_j_pct']:+.1f} %) | "
            f"{d['mape_j_pct']:.1f} % ({d['worst_j_pct']:+.1f} %) | {f['mape_s_pct']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


def evaluate(args) -> int:
    from jouleprof.predict.train_laws import get_law
    from jouleprof.predict.train_multi_fit import evaluate as judge
    from jouleprof.predict.train_multi_fit import law_block

    missing = [str(d) for d in args.evaluate if not (d / "results.csv").is_file()]
    if missing:
        print(
            f"no results.csv in {', '.join(missing)}: name several-GPU sweep folders",
            file=sys.stderr,
        )
        return 2
    rows = load_rows(args.evaluate)
    if not rows:
        print("no complete several-GPU row to fit", file=sys.stderr)
        return 2
    law = get_law("bert", "h200", "bf16")
    ev = judge(law, rows)
    ev["sweeps"] = [str(d) for d in args.evaluate]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "accuracy.json").write_text(json.dumps(ev, indent=1) + "\n")
    # TrainLaw.multi_gpu: what predict.train_laws.LAWS ships once it is measured on GPUs
    (out / "law_multi_gpu.json").write_text(json.dumps(law_block(law, rows), indent=1) + "\n")
    md = _md(ev)
    (out / "accuracy.md").write_text(md)
    print(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=2, help="processes (GPUs) per configuration")
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--measure-s", type=float, default=6.0, help="measured seconds per config")
    ap.add_argument("--est-s", type=float, default=15.0, help="expected seconds per config")
    ap.add_argument("--config-timeout-s", type=float, default=120.0)
    ap.add_argument("--smoke", action="store_true", help="tiny configs on CPU (gloo, simulated)")
    ap.add_argument("--evaluate", type=Path, nargs="+", default=None, metavar="SWEEP")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.evaluate:
        return evaluate(args)
    if args.gpus < 2:
        print("--gpus must be ≥ 2 (one GPU: benchmarks/bert_sweep.py)", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for k, v in NO_MULTICAST.items():
        os.environ.setdefault(k, v)  # kept for every torchrun job and rank started from here
    if args.smoke:  # every rank measures its own simulated board, as on one GPU per rank
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # on the CPU even where a GPU is present
    if args.worker:
        return worker(args)
    try:
        return run(args, argv)
    except KeyboardInterrupt:
        print(f"interrupted: rows so far are in {args.out}/results.csv; rerun to resume")
        return 130


if __name__ == "__main__":
    sys.exit(main())
