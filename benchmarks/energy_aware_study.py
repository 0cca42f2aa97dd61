"""The energy-aware study on a GPU, within a time budget: does lowering internal E save joules?

    PYTHONPATH=src python3 benchmarks/energy_aware_study.py --out DIR --budget-s 330 [--smoke]

In one process (each cell still its own measured run directory, see
`workloads.energy_aware.study`):

1. calibration (unmeasured): one epoch of every (arch, dataset) is timed, and one throwaway
   measured cell gives the per-cell overhead; the number of epochs is then chosen so the whole
   matrix fits the budget (every cell trains the same number of epochs);
2. the main study: archs × datasets × λ × seeds, seed-major, stopped by the budget (a rerun with
   the same --out resumes);
3. the sparse-kernel probe: dense vs CSR matmul at several sparsities and at the study's
   measured activation sparsity, timed and measured (DIR/study/sparse_probe.json);
4. a "busy" block if time is left: the larger ViT (vit-small) on synthetic data at λ = 0 and
   λ_max, to show a cell that keeps the GPU busy (utilization in its run.json).

Writes DIR/meta.json, DIR/calibration.json, DIR/study/ (the study directory: `jouleprof analyze
DIR/study`), DIR/busy/, DIR/summary.json, and prints a short table. --smoke: a tiny matrix on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

T0 = time.monotonic()


def elapsed() -> float:
    return time.monotonic() - T0


def _git() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def meta(args) -> dict:
    import torch

    gpu = driver = None
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception as e:  # the driver version is a nicety; say why it is missing
            driver = f"unavailable ({type(e).__name__})"
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": os.environ.get("JP_COMMIT") or _git(),
        "gpu": gpu,
        "driver": driver,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "command": " ".join([sys.executable, *sys.argv]),
        "budget_s": args.budget_s,
        "smoke": args.smoke,
    }


def base_spec(args, epochs: int):
    from jouleprof.workloads.energy_aware.study import EnergyStudySpec

    kw = dict(
        archs=tuple(args.archs.split(",")),
        datasets=tuple(args.datasets.split(",")),
        lambdas=tuple(float(v) for v in args.lambdas.split(",")),
        seeds=args.seeds,
        kind=args.kind,
        epochs=epochs,
        batch_size=args.batch_size,
        infer_passes=args.infer_passes,
        data_n=args.data_n,
        idle_s=args.idle_s,
        device=args.device,
        simulate_gpu_w=args.simulate_gpu_w,
        warmup_steps=2,
    )
    if args.smoke:
        kw.update(arch_overrides={"width": 16, "depth": 1}, data_side=8)
    return EnergyStudySpec(**kw)


def calibrate(args, out: Path) -> dict:
    """Seconds per epoch of every (arch, dataset) and the per-cell overhead of a measured cell."""
    import torch

    from jouleprof.workloads.energy_aware.cell import DataCache, _build, _device, run_cell
    from jouleprof.workloads.energy_aware.train import device_tensors, train

    spec = base_spec(args, 1)
    cache = DataCache()
    per_epoch: dict[str, float] = {}
    for _, cs in spec.cell_specs():
        key = f"{cs.arch}/{cs.dataset}"
        if key in per_epoch or cs.seed != 0:
            continue
        dev = _device(cs)
        data = cache.get(cs)
        tens = device_tensors(data, dev)
        model, opt, reg = _build(cs, data, dev)
        train(model, reg, opt, tens, epochs=1, batch_size=cs.batch_size, seed=0)  # warm
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t = time.perf_counter()
        train(model, reg, opt, tens, epochs=1, batch_size=cs.batch_size, seed=1)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        per_epoch[key] = time.perf_counter() - t
        reg.detach()
    first = spec.cell_specs()[0][1]
    for name in ("calibration_cell0", "calibration_cell"):  # the 2nd: steady-state overhead
        t = time.perf_counter()
        run_cell(first, out / name, cache)
        wall = time.perf_counter() - t
    rec = json.loads((out / "calibration_cell" / "run.json").read_text())
    train_s = rec["summary"]["train_time_s"]["value"]
    key = f"{first.arch}/{first.dataset}"
    overhead = max(0.0, wall - train_s)
    return {
        "seconds_per_epoch": per_epoch,
        "cell_wall_s": wall,
        "cell_train_s": train_s,
        "cell_overhead_s": overhead,
        "calibrated_on": key,
    }


def choose_epochs(cal: dict, n_cells: int, budget_s: float, lo: int, hi: int) -> int:
    per = cal["seconds_per_epoch"]
    cells_per_combo = n_cells / max(1, len(per))
    epoch_cost = cells_per_combo * sum(per.values()) * 1.3  # eval + infer + slack
    spare = budget_s - n_cells * cal["cell_overhead_s"]
    return int(max(lo, min(hi, spare // max(epoch_cost, 1e-9))))


def busy_block(args, out: Path, epochs: int, budget_s: float):
    from jouleprof.workloads.energy_aware.study import EnergyStudySpec, run_study

    lams = [float(v) for v in args.lambdas.split(",")]
    spec = EnergyStudySpec(
        archs=("vit-small",),
        datasets=("synthetic",),
        lambdas=(min(lams), max(lams)),
        seeds=2,
        kind=args.kind,
        epochs=min(epochs, 10),
        batch_size=256,
        data_n=args.data_n,
        idle_s=args.idle_s,
        device=args.device,
        simulate_gpu_w=args.simulate_gpu_w,
        infer_passes=args.infer_passes,
        warmup_steps=2,
        **(
            {"arch_overrides": {"width": 16, "depth": 1, "heads": 2}, "data_side": 8}
            if args.smoke
            else {}
        ),
    )
    return run_study(spec, out, in_process=True, time_budget_s=budget_s, progress=False)


def print_table(study_dir: Path) -> dict:
    from jouleprof.analysis.energy_study import analyze_study

    res = analyze_study(study_dir, plots=False)
    print(f"\n{res.n_complete}/{res.n_cells} cells complete; energy source: {res.energy_source}")
    print(
        f"{'arch':10s} {'dataset':10s} {'E ÷':>8s} {'acc Δpt':>8s} {'train J Δ%':>11s} "
        f"{'infer J Δ%':>11s}"
    )
    for g in res.groups:
        e = g.get("internal_energy_ratio", {}).get("ratio")
        tr = g.get("train_gpu_energy_j_ratio", {}).get("ratio")
        inf = g.get("infer_gpu_energy_j_ratio", {}).get("ratio")
        acc = g.get("accuracy_change")
        print(
            f"{g['arch']:10s} {g['dataset']:10s} {1 / e if e else float('nan'):8.3g} "
            f"{acc * 100 if acc is not None else float('nan'):8.2f} "
            f"{(tr - 1) * 100 if tr else float('nan'):11.1f} "
            f"{(inf - 1) * 100 if inf else float('nan'):11.1f}"
        )
    print("\n" + res.verdict)
    if res.sparse_statement:
        print(res.sparse_statement)
    return {"n_complete": res.n_complete, "n_cells": res.n_cells, "verdict": res.verdict}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=330.0,
        help="wall seconds for everything; cells that would start later are left",
    )
    ap.add_argument("--archs", default="mlp,cnn,vit-tiny")
    ap.add_argument("--datasets", default="digits,synthetic,shapes")
    ap.add_argument("--lambdas", default="0,1e-5,1e-4,1e-3,1e-2")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--kind", default="l1")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--data-n", type=int, default=2000)
    ap.add_argument("--infer-passes", type=int, default=30)
    ap.add_argument("--idle-s", type=float, default=0.0)
    ap.add_argument("--epochs", type=int, default=None, help="fix the epochs (no calibration)")
    ap.add_argument("--max-epochs", type=int, default=30)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--simulate-gpu-w", type=float, default=None)
    ap.add_argument("--smoke", action="store_true", help="a tiny matrix (CPU test)")
    args = ap.parse_args()
    if args.smoke:
        args.archs, args.datasets, args.lambdas = "mlp,cnn", "synthetic", "0,1e-2"
        args.seeds, args.data_n, args.infer_passes = 2, 200, 1
    args.out.mkdir(parents=True, exist_ok=True)
    from jouleprof.workloads.energy_aware.study import run_study

    m = meta(args)
    (args.out / "meta.json").write_text(json.dumps(m, indent=2) + "\n")
    print(
        f"[{elapsed():.0f}s] {m['gpu'] or 'no GPU'}, torch {m['torch']}, commit {m['git_commit']}"
    )
    probe_s = 4 if args.smoke else 14  # the sparse probe's share, kept back
    busy_s = 0 if args.smoke else 15  # the busy block's share (vit-small, 4 cells), kept back
    cal_file = args.out / "calibration.json"
    if args.epochs is not None:
        epochs, cal = args.epochs, {"fixed_epochs": args.epochs}
    elif cal_file.is_file():  # a resumed run keeps the first run's choice (same study spec)
        cal = json.loads(cal_file.read_text())
        epochs = cal["epochs"]
    else:
        try:
            cal = calibrate(args, args.out)
            n = len(base_spec(args, 1).cell_specs())
            left = args.budget_s - elapsed() - probe_s - busy_s - 8
            epochs = 1 if args.smoke else choose_epochs(cal, n, left, 2, args.max_epochs)
            cal["budget_for_study_s"] = left
        except Exception as e:  # a failed calibration must not cost the study: fall back
            cal = {"error": f"{type(e).__name__}: {e}", "fallback": True}
            epochs = 1 if args.smoke else 10
        cal["epochs"] = epochs
    cal_file.write_text(json.dumps(cal, indent=2) + "\n")
    print(f"[{elapsed():.0f}s] calibration: {json.dumps(cal)}")
    spec = base_spec(args, epochs)
    study_dir = args.out / "study"
    left = args.budget_s - elapsed() - probe_s - busy_s
    res = run_study(spec, study_dir, in_process=True, time_budget_s=max(1.0, left), progress=True)
    print(
        f"[{elapsed():.0f}s] study: {len(res.done)} done, {len(res.failed)} failed, "
        f"{len(res.skipped)} not run"
    )
    # the probe at the sparsities the cells reached
    from jouleprof.analysis.energy_study import load_cells
    from jouleprof.workloads.energy_aware.sparse_probe import DEFAULT_SPARSITIES, run_probe

    df = load_cells(study_dir)
    sp = [float(v) for v in df.get("activation_sparsity", []) if v == v]  # NaN ≠ NaN
    med = round(sorted(sp)[len(sp) // 2], 2) if sp else None
    extra = [med] if med is not None and med < 1 else []  # the cells' median sparsity
    sparsities = sorted(set(DEFAULT_SPARSITIES) | set(extra))
    try:
        probe_dir = args.out / "sparse_probe_run"
        if probe_dir.exists():
            probe_dir = args.out / f"sparse_probe_run.{int(time.time())}"
        probe = run_probe(
            probe_dir,
            sparsities,
            seconds=0.05 if args.smoke else 0.6,
            **({"m": 256, "k": 128, "n": 128} if args.smoke else {}),
            simulate_gpu_w=args.simulate_gpu_w,
        )
        (study_dir / "sparse_probe.json").write_text(json.dumps(probe, indent=2) + "\n")
        print(f"[{elapsed():.0f}s] sparse probe: {len(probe['rows'])} sparsities")
    except Exception as e:  # the probe is a row of its own; the study's results stand
        print(f"sparse probe failed: {type(e).__name__}: {e}")
    left = args.budget_s - elapsed() - 3
    if left > 10:
        b = busy_block(args, args.out / "busy", epochs, left)
        print(f"[{elapsed():.0f}s] busy block: {len(b.done)} done, {len(b.skipped)} not run")
    summary = print_table(study_dir)
    summary.update({"elapsed_s": round(elapsed(), 1), "epochs": epochs})
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"[{elapsed():.0f}s] done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
