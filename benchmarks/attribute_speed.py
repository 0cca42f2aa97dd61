"""How long `jouleprof attribute` takes on committed runs: wall and CPU seconds per stage.

Each run is attributed in a process of its own (clean memory and CPU figures; a failure is a
row, not the end), with `jouleprof.attribution.stages.recording()` collecting every stage the
attribution marks: reading the run, the refresh grids, each fit of the model choice (stall
model, bins, buffer window lengths, the bin-length check, each a point fit), the chosen model's
fit with its bootstrap and sensor-model spread. It needs no GPU: the runs are recorded ones
(benchmarks/results/attr_vith_b8/run*, which travel with the tree).

    PYTHONPATH=src python3 benchmarks/attribute_speed.py --out DIR [--runs run11 run6 ...]
        [--method regression] [--repeat 1] [--budget-s 900] [--src OTHER/src]
    PYTHONPATH=src python3 benchmarks/attribute_speed.py --compare OLD_DIR NEW_DIR

Writes DIR/runs.csv (one row per run and repeat: wall, CPU, peak memory, sizes, phases
resolved), DIR/stages.csv (per run, repeat and stage: wall and CPU seconds, calls), DIR/
results/<run>.json (the attribution itself, for comparing code versions) and DIR/meta.json
(date, commit — JP_COMMIT if set —, host, CPUs, BLAS, versions, the command); prints a table.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = ROOT / "benchmarks" / "results" / "attr_vith_b8"
DEFAULT_RUNS = ("run11", "run6", "run9", "run4", "run5")


def _sizes(run: Path) -> dict[str, int | None]:
    """Rows of the run's inputs (samples, spans, power buffer)."""
    out: dict[str, int | None] = {}
    for key, name in (
        ("samples", "samples.csv"),
        ("spans", "spans.csv"),
        ("buffer", "power_buffer.csv"),
    ):
        p = run / name
        out[f"n_{key}"] = sum(1 for _ in p.open()) - 1 if p.is_file() else None
    return out


def attribute_one(
    run: str,
    method: str,
    unpin_blas: bool = False,
    serial: bool = False,
    pool: bool = False,
    ahead: str = "auto",
) -> dict:
    """Attribute `run` by `method` in this process; the timings and the result (JSON-able).
    `unpin_blas`: the fits run on BLAS's default thread pool instead of one thread (what the
    pin in `regression._one_blas_thread` saves). `serial`: every fit in this process (no
    worker pool for the model choice's independent fits, `attribution.parallel`); `pool`: the
    pool wherever it can run, whatever the load. `ahead`: the later choices' fits started with
    the first ones ("on": wherever the pool runs; "off": never; "auto": where every one gets a
    core, `parallel.SPECULATE`). cpu_s counts this process and its finished
    workers (workers_cpu_s)."""
    import contextlib
    import resource

    if serial or pool:
        try:
            import jouleprof.attribution.parallel as parallel

            parallel.PARALLEL = not serial
        except ImportError:  # a version from before the pool
            pass
    if ahead != "auto":
        import jouleprof.attribution.parallel as parallel

        if not hasattr(parallel, "SPECULATE"):
            raise SystemExit("--ahead: this version of the code has no fits ahead of the choices")
        parallel.SPECULATE = ahead == "on"
        if ahead == "on":
            parallel.PARALLEL = True

    if unpin_blas:
        import jouleprof.attribution.regression as regression

        regression._one_blas_thread = contextlib.nullcontext
    from jouleprof.attribution import attribute
    from jouleprof.attribution.stages import recording

    stages_seen: list[str] = []
    w0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu_s()
    with recording() as times:
        res = attribute(run, method, progress=stages_seen.append)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    workers_cpu = _children_cpu_s() - k0
    totals = times.totals()
    counts: dict[str, int] = {}
    for path, _, _ in times.rows:
        counts[path] = counts.get(path, 0) + 1
    phases = [p for d in res.devices for p in d.phases]
    return {
        "wall_s": wall,
        "cpu_s": cpu + workers_cpu,
        "workers_cpu_s": workers_cpu,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "n_phases": len(phases),
        "n_resolved": sum(p.resolved for p in phases),
        "stages": [
            {"stage": k, "wall_s": v[0], "cpu_s": v[1], "calls": counts[k]}
            for k, v in totals.items()
        ],
        "progress_messages": len(stages_seen),
        "result": res.to_json(),
    }


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished (waited-for) children."""
    t = os.times()
    return t.children_user + t.children_system


def _child(run: str, method: str, unpin_blas: bool, serial: bool, pool: bool, ahead: str) -> None:
    doc = attribute_one(run, method, unpin_blas, serial, pool, ahead)
    sys.stdout.write(json.dumps(doc, default=str))


def _git_commit() -> str | None:
    if os.environ.get("JP_COMMIT"):
        return os.environ["JP_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _meta(argv: list[str]) -> dict:
    import numpy
    import scipy

    try:
        from threadpoolctl import threadpool_info

        blas = [
            {k: d.get(k) for k in ("internal_api", "num_threads", "version")}
            for d in threadpool_info()
        ]
    except Exception as e:  # noqa: BLE001 — a report, not a requirement
        blas = f"unavailable: {e}"
    return {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "load_avg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "blas": blas,
        "gpu": None,
        "command": " ".join(["python3", "benchmarks/attribute_speed.py", *argv]),
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="output directory")
    ap.add_argument(
        "--runs",
        nargs="+",
        default=list(DEFAULT_RUNS),
        help="run directories, or names under benchmarks/results/attr_vith_b8",
    )
    ap.add_argument("--method", default="regression", help="proportional, regression, isolation")
    ap.add_argument("--repeat", type=int, default=1, help="attribute each run this many times")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=1800.0,
        help="start no new attribution after this many seconds",
    )
    ap.add_argument("--timeout-s", type=float, default=900.0, help="limit for one attribution")
    ap.add_argument(
        "--src",
        type=Path,
        default=ROOT / "src",
        help="the jouleprof source tree to time (default: this checkout's src; another "
        "version's, e.g. a git worktree's, for a before/after on the same machine)",
    )
    ap.add_argument(
        "--unpin-blas",
        action="store_true",
        help="let the fits use BLAS's default thread pool (to see what pinning it saves)",
    )
    ap.add_argument(
        "--serial",
        action="store_true",
        help="every fit in the attributing process (no worker pool for the independent fits)",
    )
    ap.add_argument(
        "--pool",
        action="store_true",
        help="the worker pool for the independent fits whatever the machine's load",
    )
    ap.add_argument(
        "--ahead",
        choices=("auto", "on", "off"),
        default="auto",
        help="the model choice's later fits started beside the first ones: where every one "
        "gets a core (auto), wherever the pool runs (on), never (off)",
    )
    ap.add_argument("--child", nargs=2, metavar=("RUN", "METHOD"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD_DIR", "NEW_DIR"),
        help="compare the results/<run>.json of two --out folders (exit 1 if they differ)",
    )
    a = ap.parse_args(argv)
    if a.child:
        _child(*a.child, a.unpin_blas, a.serial, a.pool, a.ahead)
        return
    if a.compare:
        ok = True
        for p_old in sorted((Path(a.compare[0]) / "results").glob("*.json")):
            p_new = Path(a.compare[1]) / "results" / p_old.name
            if not p_new.is_file():
                print(f"{p_old.stem}: no new result")
                ok = False
                continue
            same, lines = compare_results(
                json.loads(p_old.read_text()), json.loads(p_new.read_text())
            )
            print(f"{p_old.stem}: {'same' if same else 'DIFFERENT'}")
            print("\n".join(lines))
            ok &= same
        raise SystemExit(0 if ok else 1)
    if a.out is None:
        ap.error("--out is required")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results").mkdir(exist_ok=True)
    meta = _meta(argv)
    meta["src"] = str(a.src)
    meta["blas_pinned_in_fits"] = not a.unpin_blas
    meta["fits_pool"] = (
        "off (--serial)"
        if a.serial
        else "on (--pool)"
        if a.pool
        else "where it pays (attribution.parallel)"
    )
    meta["fits_ahead"] = a.ahead
    (a.out / "meta.json").write_text(json.dumps(meta, indent=2))
    env = {
        **os.environ,
        "PYTHONPATH": str(a.src.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    run_rows, stage_rows = [], []
    t_start = time.monotonic()
    for name in a.runs:
        run = Path(name) if Path(name).is_dir() else RUNS_DIR / name
        for rep in range(a.repeat):
            row = {"run": run.name, "repeat": rep, "method": a.method, **_sizes(run)}
            if time.monotonic() - t_start > a.budget_s:
                row["error"] = "skipped: over --budget-s"
                run_rows.append(row)
                continue
            try:
                cp = subprocess.run(
                    [sys.executable, __file__, "--out", str(a.out), "--child", str(run), a.method]
                    + (["--unpin-blas"] if a.unpin_blas else [])
                    + (["--serial"] if a.serial else [])
                    + (["--pool"] if a.pool else [])
                    + ["--ahead", a.ahead],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=a.timeout_s,
                )
                if cp.returncode != 0:
                    raise RuntimeError((cp.stderr.strip().splitlines() or ["?"])[-1])
                doc = json.loads(cp.stdout)
            except (subprocess.TimeoutExpired, RuntimeError, json.JSONDecodeError) as e:
                row["error"] = str(e)[:300]
                run_rows.append(row)
                print(f"{run.name}: {row['error']}", file=sys.stderr)
                continue
            row.update(
                {
                    k: doc.get(k)
                    for k in (
                        "wall_s",
                        "cpu_s",
                        "workers_cpu_s",
                        "maxrss_mib",
                        "n_phases",
                        "n_resolved",
                    )
                }
            )
            run_rows.append(row)
            for s in doc["stages"]:
                stage_rows.append({"run": run.name, "repeat": rep, **s})
            if rep == 0:
                (a.out / "results" / f"{run.name}.json").write_text(
                    json.dumps(doc["result"], indent=1)
                )
    _write_csv(a.out / "runs.csv", run_rows)
    _write_csv(a.out / "stages.csv", stage_rows)
    meta["elapsed_s"] = time.monotonic() - t_start
    (a.out / "meta.json").write_text(json.dumps(meta, indent=2))
    _print_table(run_rows, stage_rows)


def compare_results(old: dict, new: dict, tol: float = 0.1) -> tuple[bool, list[str]]:
    """Whether two attributions of a run (AttributionResult.to_json(), e.g. two code versions'
    results/<run>.json) agree: the same phases resolved, every estimate within `tol` × the
    old interval's half-width, the same notes (the device's and every phase's). Returns
    (same, lines saying how far)."""
    same, out = True, []
    new_devs = {d["device"]: d for d in new["devices"]}
    for d_old in old["devices"]:
        dev = d_old["device"]
        d_new = new_devs.get(dev)
        if d_new is None:
            return False, [f"{dev}: missing from the new result"]
        po = {p["phase"]: p for p in d_old["phases"]}
        pn = {p["phase"]: p for p in d_new["phases"]}
        ro = {k for k, p in po.items() if p["resolved"]}
        rn = {k for k, p in pn.items() if p["resolved"]}
        if ro != rn or set(po) != set(pn):
            same = False
            out.append(
                f"{dev}: resolved differ (old only {sorted(ro - rn)}, new only {sorted(rn - ro)})"
            )
        worst = 0.0
        for k in sorted(ro & rn):
            o, n = po[k], pn[k]
            half = 0.5 * (o["energy_hi_j"] - o["energy_lo_j"])
            move = abs(n["energy_j"] - o["energy_j"]) / half if half > 0 else float("inf")
            worst = max(worst, move)
            half_new = 0.5 * (n["energy_hi_j"] - n["energy_lo_j"])
            out.append(
                f"  {dev} {k:30s} {o['energy_j']:.6g} ±{half:.4g} -> {n['energy_j']:.6g} "
                f"±{half_new:.4g} J: moved {move:.2g} half-widths"
            )
        same &= worst <= tol
        if d_old["notes"] != d_new["notes"]:
            same = False
            out += [f"{dev}: notes differ"] + [
                f"    old: {a}\n    new: {b}"
                for a, b in zip(d_old["notes"], d_new["notes"], strict=False)
                if a != b
            ]
        differing = sorted(k for k in set(po) & set(pn) if po[k]["note"] != pn[k]["note"])
        if differing:
            same = False
            out += [f"    {k}: {po[k]['note']!r}\n      -> {pn[k]['note']!r}" for k in differing]
        out.append(
            f"{dev}: worst move {worst:.2g} half-widths; phase notes differing: {len(differing)}"
        )
    return same, out


def _write_csv(path: Path, rows: list[dict]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def _print_table(run_rows: list[dict], stage_rows: list[dict]) -> None:
    head = ("run", "samples", "spans", "buffer", "wall_s", "cpu_s", "MiB")
    print("{:8s} {:>8s} {:>6s} {:>7s} {:>8s} {:>8s} {:>6s}  resolved".format(*head))
    for r in run_rows:
        if "error" in r:
            print(f"{r['run']:8s} {r['error']}")
            continue
        sizes = [r[k] or 0 for k in ("n_samples", "n_spans", "n_buffer")]
        print(
            f"{r['run']:8s} {sizes[0]:8d} {sizes[1]:6d} {sizes[2]:7d} {r['wall_s']:8.1f} "
            f"{r['cpu_s']:8.1f} {r['maxrss_mib']:6.0f}  {r['n_resolved']}/{r['n_phases']}"
        )
    top = [s for s in stage_rows if s["stage"].count("/") <= 2 and s["repeat"] == 0]
    for run in dict.fromkeys(s["run"] for s in top):
        print(f"\n{run}: stage (wall s / CPU s / calls)")
        for s in top:
            if s["run"] == run:
                print(f"  {s['stage']:70s} {s['wall_s']:7.2f} {s['cpu_s']:7.2f} {s['calls']:4d}")


if __name__ == "__main__":
    main()
