"""Benchmark of the measurement core on a real GPU (issue: measurement core).

Measures, on the card as found (nothing about it is changed):
  1. what `jouleprof sensors` detects (signals, refresh periods, read costs);
  2. whether the energy counter and the power fields refresh at the same instants
     (5 ms reads, counter read on every poll, under a square-wave load);
  3. idle power (`jouleprof measure -- sleep`);
  4. `jouleprof measure` around a known bf16 matmul load, steady and square-wave, repeated:
     counter energy vs the trapezoid of the instant and 1 s-average power;
  5. the sampler's own CPU cost at 20 ms and 5 ms intervals, with the counter read sparsely
     (measure/e2e) and every refresh (fine mode), and the counter read time.

Writes JSON/CSV under --out and prints a short table last.
Run: PYTHONPATH=src python benchmarks/measure_core.py --out $OUT/measure_core
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JP = [sys.executable, "-m", "jouleprof.cli.main"]


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def load_cmd(seconds: float, square_wave_s: float = 0.0) -> list[str]:
    return [
        sys.executable,
        str(HERE / "load_matmul.py"),
        "--seconds",
        str(seconds),
        "--square-wave-s",
        str(square_wave_s),
    ]


def refresh_alignment(out: Path, seconds: float) -> dict:
    """Read every signal (counter included) every 5 ms under a square-wave load."""
    import numpy as np

    from jouleprof.clock import MonotonicClock
    from jouleprof.sensors.nvml import NvmlSensor
    from jouleprof.sensors.refresh import detect_refresh, update_brackets
    from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig

    load = subprocess.Popen(load_cmd(seconds + 2, 0.23), stdout=subprocess.DEVNULL)
    time.sleep(1.5)
    sensor = NvmlSensor([0])
    sink = ListSink()
    cfg = SamplerConfig(interval_s=0.005, counter_interval_s=0.0)
    with Sampler([sensor], sink, cfg, clock=MonotonicClock()) as s:
        time.sleep(seconds)
    load.wait()
    sensor.close()
    rows = [x.row() for x in sink.samples]
    import pandas as pd

    from jouleprof.types import SAMPLE_COLUMNS

    df = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    df.to_csv(out / "refresh_alignment_samples.csv", index=False)
    res: dict = {
        "seconds": seconds,
        "interval_s": 0.005,
        "mean_counter_read_s": s.stats.mean_counter_read_s,
        "max_counter_read_s": s.stats.max_counter_read_s,
        "signals": {},
    }
    t = df["t_s"].to_numpy()
    grids = {}
    for sig in ("power_instant_w", "power_w", "energy_j"):
        v = df[sig].to_numpy(dtype=float)
        est = detect_refresh(t, v, sig, min_updates=5)
        lo, hi = update_brackets(t, v)
        res["signals"][sig] = {
            "n_updates": int(len(lo)),
            "median_bracket_s": float(np.median(hi - lo)) if len(lo) else None,
            "grid": est.to_json() if est else None,
        }
        grids[sig] = est
    base = grids.get("power_instant_w")
    for sig, est in grids.items():
        if base is not None and est is not None:
            d = (est.offset_s - base.offset_s) % base.period_s
            d = d - base.period_s if d > base.period_s / 2 else d
            res["signals"][sig]["offset_vs_instant_s"] = float(d)
    return res


def sampler_cost(interval_s: float, seconds: float, counter: str) -> dict:
    """CPU cost of the sampler thread: counter "sparse" (what `jouleprof measure` uses: every
    5 s, a 1 s burst of per-refresh reads each 60 s), "1s" (the e2e mode's ~1/s, bursts each
    30 s) or "every-refresh" (fine mode).

    Besides the whole run's figure (its first second is a dense burst), the steady state is
    measured from 2 s on by reading the thread's CPU clock from outside it.
    """
    from jouleprof.clock import MonotonicClock
    from jouleprof.sensors.nvml import NvmlSensor
    from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig

    # Slow fields as each mode reads them (MeasureConfig.slow_fields_period_s): 0.5 s in
    # `measure` and e2e, 0.1 s in fine mode.
    if counter == "sparse":
        cfg = SamplerConfig(
            interval_s=interval_s, counter_interval_s=5.0, counter_burst_every_s=60.0
        )
        slow_s = 0.5
    elif counter == "1s":
        cfg = SamplerConfig(
            interval_s=interval_s, counter_interval_s=1.0, counter_burst_every_s=30.0
        )
        slow_s = 0.5
    else:
        cfg = SamplerConfig(interval_s=interval_s, counter_interval_s=0.1)
        slow_s = 0.1
    sensor = NvmlSensor([0], slow_period_s=slow_s)
    skip_s = 2.0
    with Sampler([sensor], ListSink(), cfg, clock=MonotonicClock()) as s:
        time.sleep(skip_s)
        clk = time.pthread_getcpuclockid(s._thread.ident)
        c0, n0, w0 = time.clock_gettime(clk), s.stats.n_counter_reads, time.perf_counter()
        time.sleep(max(seconds - skip_s, 1.0))
        c1, n1, w1 = time.clock_gettime(clk), s.stats.n_counter_reads, time.perf_counter()
    sensor.close()
    st = s.stats.to_json()
    st["interval_s"] = interval_s
    st["counter"] = counter
    st["slow_fields_period_s"] = slow_s
    st["steady_window_s"] = w1 - w0
    st["steady_cpu_fraction_of_core"] = (c1 - c0) / (w1 - w0)
    st["steady_counter_reads"] = n1 - n0
    return st


def measured(out_dir: Path, cmd: list[str], idle_s: float = 2.0) -> dict:
    r = sh(
        [
            *JP,
            "measure",
            "--gpus",
            "0",
            "--out",
            str(out_dir),
            "--idle-s",
            str(idle_s),
            "--json",
            "--",
            *cmd,
        ]
    )
    if r.returncode != 0:
        return {"error": r.stderr[-2000:], "returncode": r.returncode}
    # stdout also carries the child's own output: read the summary from run.json.
    summary = json.loads((out_dir / "run.json").read_text())["summary"]
    return {k: summary[k].get("value") for k in summary} | {
        "_signals": {k: summary[k].get("signal") for k in summary}
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--load-s", type=float, default=12.0)
    ap.add_argument(
        "--only",
        choices=("all", "sampler"),
        default="all",
        help="sampler: only the sampler's CPU cost (under a square-wave matmul load)",
    )
    ap.add_argument("--sampler-s", type=float, default=12.0, help="seconds per sampler config")
    ap.add_argument(
        "--sampler-reps", type=int, default=1, help="runs of the 20 ms, counter-sparse config"
    )
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    smi = sh(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,power.limit,clocks.max.sm,pstate,persistence_mode",
            "--format=csv,noheader",
        ]
    )
    results["nvidia_smi"] = smi.stdout.strip()

    if args.only == "sampler":
        results["sampler_cost"] = sampler_costs(args.sampler_s, args.sampler_reps)
        results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        (out / "sampler_cost.json").write_text(json.dumps(results, indent=1))
        print_sampler_costs(results["sampler_cost"])
        return

    r = sh([*JP, "sensors", "--json", "--probe-s", "3"])
    results["sensors"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-2000:]}

    results["refresh_alignment"] = refresh_alignment(out, 6.0)

    results["idle"] = measured(out / "idle", ["sleep", "6"], idle_s=2.0)

    runs = []
    for rep in range(args.reps):
        for name, wave in (("steady", 0.0), ("square_250ms", 0.25)):
            d = out / f"matmul_{name}_{rep}"
            m = measured(d, load_cmd(args.load_s, wave))
            m["pattern"], m["rep"] = name, rep
            runs.append(m)
            with open(out / "measure_runs.json", "w") as f:
                json.dump(runs, f, indent=1)
    results["matmul"] = runs

    results["sampler_cost"] = sampler_costs(args.sampler_s, args.sampler_reps)

    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    (out / "measure_core.json").write_text(json.dumps(results, indent=1))

    print("\n=== summary ===")
    print("nvidia-smi:", results["nvidia_smi"])
    ra = results["refresh_alignment"]
    for sig, v in ra["signals"].items():
        g = v.get("grid") or {}
        print(
            f"refresh {sig:16s} period={g.get('period_s')} jitter={g.get('jitter_s')} "
            f"offset_vs_instant={v.get('offset_vs_instant_s')} n={v['n_updates']}"
        )
    print("counter read s: mean", ra["mean_counter_read_s"], "max", ra["max_counter_read_s"])
    print(
        "idle power W:",
        results["idle"].get("gpu0.idle_power_w"),
        "avg during sleep:",
        results["idle"].get("gpu0.avg_power_w"),
    )
    for m in runs:
        print(
            f"{m.get('pattern')} rep{m.get('rep')}: E={m.get('gpu0.energy_j')} J "
            f"P={m.get('gpu0.avg_power_w')} W inst={m.get('gpu0.crosscheck_instant_pct')}% "
            f"avg={m.get('gpu0.crosscheck_avg_pct')}% peak={m.get('gpu0.peak_power_w')}",
            m.get("error", ""),
        )
    print_sampler_costs(results["sampler_cost"])


def sampler_costs(seconds: float, reps_20ms: int = 1) -> list[dict]:
    """The sampler's CPU cost at 20 and 5 ms, counter sparse and every refresh, under load;
    the 20 ms sparse configuration (the target's) `reps_20ms` times, spread over the run."""
    configs = [(c, iv) for c in ("sparse", "1s", "every-refresh") for iv in (0.02, 0.005)]
    configs += [("sparse", 0.02)] * (reps_20ms - 1)
    load = subprocess.Popen(
        load_cmd(len(configs) * seconds + 10.0, 0.25), stdout=subprocess.DEVNULL
    )
    time.sleep(2.0)
    try:
        return [sampler_cost(iv, seconds, counter) for counter, iv in configs]
    finally:
        load.terminate()
        load.wait()


def print_sampler_costs(costs: list[dict]) -> None:
    for c in costs:
        print(
            f"sampler {c['interval_s'] * 1e3:.0f} ms, counter {c['counter']}: "
            f"cpu {c['cpu_fraction_of_core']:.4f} of a core "
            f"(steady {c['steady_cpu_fraction_of_core']:.4f}), polls {c['n_polls']}, "
            f"counter reads {c['n_counter_reads']}, mean counter read {c['mean_counter_read_s']}"
        )


if __name__ == "__main__":
    main()
