"""Do the regression's 95 % intervals hold the truth 95 % of the time? Simulated runs, known truth.

Each run is drawn at random (seeded): a step of 3–6 phases of 3–120 ms at 100–700 W (a long
phase may step its power halfway through, so that bins are needed), a slow power drift common to
every phase (a sine of ±0.5–1.5 % and a 4–10 s period, or none), the counter's and the power
fields' refresh jitter, the sampler's interval and wake-up delays, span-edge noise, a run of
30 s to 4 min, and in about half the runs NVML's power buffer (a sample every ~20 ms, the
exponential kernel the regression assumes, with noise). The simulated GPU
(`jouleprof.sensors.simulated`) is read by the real sampler; the run is attributed by the
regression with its defaults (the model chosen as for a recorded run); each phase's true energy
over the analysed steps is compared with its interval.

    PYTHONPATH=src python3 benchmarks/interval_coverage.py --out DIR [--runs 120] [--seed 0]
        [--budget-s 3000] [--min-share-pct 2]

Writes DIR/phases.csv (one row per run and phase: truth, estimate, interval, covered, the
run's settings), DIR/runs.csv (one row per run: settings, timings, error if any), DIR/
summary.json (coverage and median half-width of every phase holding ≥ --min-share-pct of the
energy, overall and by run length, drift, buffer and phase length) and DIR/meta.json; prints
the summary.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

BUFFER_PERIOD_S = 0.020
BUFFER_NOISE_W = 1.0
DRIFT_PIECE_S = 0.005
"""A drifting phase's power is held constant over pieces this long."""


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    power_w: float
    power2_w: float | None = None
    """Power of the phase's second half (a long phase whose power steps), or None: flat."""
    duration_jitter: float = 0.05


@dataclass(frozen=True)
class Scenario:
    """One simulated run's settings."""

    seed: int
    phases: tuple[Phase, ...]
    run_s: float
    drift_rel: float
    drift_period_s: float
    counter_jitter_s: float
    power_jitter_s: float
    power_period_s: float
    interval_s: float
    pickup_delay_s: float
    span_noise_s: float
    buffer: bool
    idle_w: float = 90.0
    replay: tuple[str, ...] = ()
    """Replayable phases (`--repeat`): each runs twice, with chance `repeat_fraction`, in the
    steps of the run's first 75 %, as `PhaseRecorder.replay` with a `RepeatConfig` would."""
    repeat_fraction: float = 0.0
    notes: dict = field(default_factory=dict)

    def flat(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("phases", "notes", "replay")}
        d["replay"] = ",".join(self.replay)
        d["n_phases"] = len(self.phases)
        d["step_ms"] = 1e3 * sum(p.duration_s for p in self.phases)
        d["phases"] = ";".join(
            f"{p.name}:{1e3 * p.duration_s:.1f}ms@{p.power_w:.0f}"
            + (f"/{p.power2_w:.0f}" if p.power2_w is not None else "")
            + "W"
            for p in self.phases
        )
        return d


def draw_scenario(seed: int, repeat_fraction: float = 0.0) -> Scenario:
    """A random run (the module docstring's ranges), reproducible from `seed`; with
    `repeat_fraction`, the same run with each phase replayable with chance 1/2 (at least one),
    drawn apart so that the rest of the scenario is the seed's as without."""
    rng = np.random.default_rng([seed, 14])
    n = int(rng.integers(3, 7))
    phases = []
    long_i = int(rng.integers(0, n))
    for i in range(n):
        if i == long_i:
            d = float(rng.uniform(0.040, 0.120))
        else:
            d = float(np.exp(rng.uniform(np.log(0.003), np.log(0.075))))
        p = float(rng.uniform(100, 700))
        p2 = float(rng.uniform(100, 700)) if (i == long_i and rng.random() < 0.4) else None
        phases.append(Phase(f"p{i}", d, p, p2, float(rng.uniform(0.02, 0.08))))
    drift = float(rng.uniform(0.005, 0.015)) if rng.random() < 0.7 else 0.0
    return Scenario(
        seed=seed,
        phases=tuple(phases),
        run_s=float(np.exp(rng.uniform(np.log(30), np.log(240)))),
        drift_rel=drift,
        drift_period_s=float(rng.uniform(4, 10)),
        counter_jitter_s=float(rng.uniform(0.5e-3, 3e-3)),
        power_jitter_s=float(rng.uniform(1e-3, 8e-3)),
        power_period_s=float(rng.uniform(0.1005, 0.1030)),
        interval_s=float(rng.choice([0.010, 0.015, 0.020, 0.025])),
        pickup_delay_s=float(rng.uniform(0.5e-3, 6e-3)),
        span_noise_s=float(rng.choice([0.0, 20e-6, 100e-6])),
        buffer=bool(rng.random() < 0.5),
        replay=_draw_replay(seed, n) if repeat_fraction > 0 else (),
        repeat_fraction=repeat_fraction,
    )


def _draw_replay(seed: int, n_phases: int) -> tuple[str, ...]:
    rng = np.random.default_rng([seed, 15])
    chosen = [f"p{i}" for i in range(n_phases) if rng.random() < 0.5]
    return tuple(chosen) or (f"p{int(rng.integers(0, n_phases))}",)


@dataclass
class SimRun:
    samples: object
    spans: object
    buffer: object
    step_energy_j: np.ndarray
    """(steps, phases): each phase's true energy in each step."""
    names: list[str]


def simulate(sc: Scenario) -> SimRun:
    """Run the scenario on the simulated GPU and sample it with the real sampler."""
    import pandas as pd

    from jouleprof.clock import ManualClock
    from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig
    from jouleprof.sensors.simulated import PowerSchedule, SensorModel, SimulatedGPU
    from jouleprof.types import SAMPLE_COLUMNS, SPAN_COLUMNS, Span

    rng = np.random.default_rng([sc.seed, 1])
    phase0 = float(rng.uniform(0, 2 * np.pi))
    lead_s = 1.0
    sched = PowerSchedule(idle_w=sc.idle_w)
    sched.append(lead_s, sc.idle_w)

    def drift(t: float) -> float:
        return 1.0 + sc.drift_rel * math.sin(2 * math.pi * t / sc.drift_period_s + phase0)

    def draw(d: float, p: float) -> None:
        if sc.drift_rel == 0:
            sched.append(d, p)
            return
        k = max(1, int(math.ceil(d / DRIFT_PIECE_S)))
        for _ in range(k):
            sched.append(d / k, p * drift(sched.end_s + 0.5 * d / k))

    names = [p.name for p in sc.phases]
    spans, energy = [], []
    step = 0
    rep_rng = np.random.default_rng([sc.seed, 16])
    repeat_until_s = lead_s + 0.75 * sc.run_s
    while sched.end_s < lead_s + sc.run_s:
        row = []
        for ph in sc.phases:
            twice = (
                ph.name in sc.replay
                and sched.end_s < repeat_until_s
                and rep_rng.random() < sc.repeat_fraction
            )
            e = 0.0
            for _ in range(2 if twice else 1):
                d = ph.duration_s * max(0.2, 1.0 + rng.normal(0.0, ph.duration_jitter))
                t0 = sched.end_s
                if ph.power2_w is None:
                    draw(d, ph.power_w)
                else:
                    draw(d / 2, ph.power_w)
                    draw(d / 2, ph.power2_w)
                t1 = sched.end_s
                n0, n1 = rng.normal(0.0, sc.span_noise_s, 2) if sc.span_noise_s > 0 else (0.0, 0.0)
                spans.append(Span(step, ph.name, float(t0 + n0), float(max(t1 + n1, t0 + n0))))
                e += sched.energy_j(t0, t1)
            row.append(e)
        energy.append(row)
        step += 1
    sched.append(lead_s, sc.idle_w)

    model = SensorModel(
        refresh_jitter_s=sc.counter_jitter_s,
        power_refresh_s=sc.power_period_s,
        power_refresh_jitter_s=sc.power_jitter_s,
    )
    clock = ManualClock()
    gpu = SimulatedGPU(sched, clock, model, seed=sc.seed + 1)
    sink = ListSink()
    sampler = Sampler([gpu], sink, SamplerConfig(interval_s=sc.interval_s), clock=clock)
    sampler.mark_start()
    end, dither = sched.end_s, sampler.config.dither
    t, first = 0.0, True
    while t < end:
        clock.advance_s(max(t - clock.now_s(), 0.0))
        last = t + sc.interval_s * (1 + dither) >= end
        sampler.poll_once(force_counter=first or last)
        first = False
        t += sc.interval_s * float(rng.uniform(1 - dither, 1 + dither))
        t += float(rng.uniform(0.0, sc.pickup_delay_s))
    sampler.flush()
    samples = pd.DataFrame([s.row() for s in sink.samples], columns=list(SAMPLE_COLUMNS))
    spans_df = pd.DataFrame([s.row() for s in spans], columns=list(SPAN_COLUMNS))
    buffer = _buffer(sched, rng, end) if sc.buffer else None
    return SimRun(samples, spans_df, buffer, np.array(energy), names)


def _buffer(sched, rng, end_s: float):
    """NVML's power buffer as the regression assumes it: a sample every ~20 ms, each the power
    weighed by the exponential kernel over the window before its stamp, less the lag."""
    import pandas as pd

    from jouleprof.attribution.regression_config import BUFFER_KERNEL, BUFFER_LAG_S, BUFFER_WINDOW_S

    n = int(end_s / BUFFER_PERIOD_S)
    t = 0.2 + np.cumsum(rng.normal(BUFFER_PERIOD_S, 0.3e-3, n))
    t = t[t < end_s - 0.2]
    p = np.zeros(len(t))
    for start, stop, weight in BUFFER_KERNEL:
        a = t - BUFFER_LAG_S - start * BUFFER_WINDOW_S
        b = t - BUFFER_LAG_S - stop * BUFFER_WINDOW_S
        p += weight * np.array([sched.mean_power_w(x, y) for x, y in zip(a, b, strict=True)])
    p += rng.normal(0.0, BUFFER_NOISE_W, len(t))
    return pd.DataFrame({"t_s": t, "device": "gpu0", "power_w": np.round(p, 3)})


def attribute_run(sim: SimRun, replay: tuple[str, ...] = (), **cfg_fields):
    """The regression's result for the simulated run (as `jouleprof attribute` would give it:
    where `replay` names repeated phases, under the repeat rule and its checks,
    `repeat_rule.fit_with_rule`)."""
    from jouleprof.attribution.common import build_timeline, check_spans
    from jouleprof.attribution.regression import RegressionConfig, attribute_regression
    from jouleprof.attribution.repeat_rule import fit_with_rule

    check_spans(sim.spans, sim.samples, "gpu0")
    t = sim.samples["t_s"]
    tl = build_timeline(sim.spans, float(t.min()), float(t.max()))
    cfg = RegressionConfig(**cfg_fields)
    extra = {"repeat": {"phases": list(replay)}} if replay else {}

    def fit(c, b):
        return attribute_regression(sim.samples, tl, "gpu0", c, b)

    def fit_relabelled(other, c, b):
        tl2 = build_timeline(other, float(t.min()), float(t.max()), len(tl.warmup_steps))
        return attribute_regression(sim.samples, tl2, "gpu0", c, b)

    res = fit_with_rule(fit, fit_relabelled, cfg, sim.buffer, extra, sim.spans, tl.analysed_steps)
    left_out = "buffer_rows_left_out" in res.diagnostics
    res.diagnostics["buffer_rows_used"] = sim.buffer is not None and not left_out
    return res


def score(sc: Scenario, sim: SimRun, res, min_share_pct: float) -> list[dict]:
    """One row per phase: truth over the analysed steps, estimate, interval, covered."""
    warm = res.warmup_steps
    truth = sim.step_energy_j[warm : warm + res.n_steps].sum(axis=0)
    total = float(truth.sum())
    rows = []
    for j, name in enumerate(sim.names):
        try:
            p = res.phase(name)
        except KeyError:
            continue
        share = 100 * truth[j] / total
        row = {
            "seed": sc.seed,
            "phase": name,
            "duration_ms": 1e3 * sc.phases[j].duration_s,
            "power_w": sc.phases[j].power_w,
            "stepped": sc.phases[j].power2_w is not None,
            "replayed": name in sc.replay,
            "true_share_pct": share,
            "counted": share >= min_share_pct,
            "truth_j": float(truth[j]),
            "resolved": p.resolved,
            "energy_j": p.energy_j,
            "lo_j": p.energy_lo_j,
            "hi_j": p.energy_hi_j,
        }
        if p.resolved:
            row["error_pct"] = 100 * (p.energy_j - truth[j]) / truth[j]
            row["half_width_pct"] = 50 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j
            row["covered"] = bool(p.energy_lo_j <= truth[j] <= p.energy_hi_j)
        rows.append(row)
    return rows


def one(seed: int, min_share_pct: float, cfg_fields: dict, repeat_fraction: float = 0.0):
    """Draw, simulate, attribute and score one run: (run row, phase rows)."""
    sc = draw_scenario(seed, repeat_fraction)
    row = {"seed": seed, **sc.flat()}
    t0 = time.perf_counter()
    sim = simulate(sc)
    row["simulate_s"] = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        res = attribute_run(sim, sc.replay, **cfg_fields)
    except Exception as e:  # noqa: BLE001 — a failed run is a row
        row["error"] = f"{type(e).__name__}: {e}"[:300]
        return row, []
    row["attribute_wall_s"] = time.perf_counter() - t0
    row["attribute_cpu_s"] = time.process_time() - c0
    row["n_steps"] = res.n_steps
    row["model"] = "stall" if res.diagnostics.get("stall") else "plain"
    row["bins"] = bool(res.diagnostics.get("bins"))
    row["block_rows"] = res.diagnostics.get("block_rows")
    row["block_s"] = res.diagnostics.get("block_s")
    row["buffer_rows_used"] = res.diagnostics.get("buffer_rows_used")
    return row, score(sc, sim, res, min_share_pct)


def summarize(phases: list[dict]) -> dict:
    """Coverage and median half-width of the counted phases, overall and by group."""

    def stats(rows: list[dict]) -> dict:
        res = [r for r in rows if r["resolved"]]
        cov = [r["covered"] for r in res]
        hw = [r["half_width_pct"] for r in res]
        err = [abs(r["error_pct"]) for r in res]
        return {
            "n_phases": len(rows),
            "n_resolved": len(res),
            "coverage": float(np.mean(cov)) if cov else None,
            "median_half_width_pct": float(np.median(hw)) if hw else None,
            "median_abs_error_pct": float(np.median(err)) if err else None,
            "misses": int(len(cov) - sum(cov)),
        }

    counted = [r for r in phases if r["counted"]]
    groups = {
        "all": counted,
        "run < 90 s": [r for r in counted if r["run_s"] < 90],
        "run >= 90 s": [r for r in counted if r["run_s"] >= 90],
        "drift": [r for r in counted if r["drift_rel"] > 0],
        "no drift": [r for r in counted if r["drift_rel"] == 0],
        "buffer": [r for r in counted if r["buffer"]],
        "no buffer": [r for r in counted if not r["buffer"]],
        "phase < 10 ms": [r for r in counted if r["duration_ms"] < 10],
        "phase 10-40 ms": [r for r in counted if 10 <= r["duration_ms"] < 40],
        "phase >= 40 ms": [r for r in counted if r["duration_ms"] >= 40],
    }
    if any(r.get("replayed") for r in counted):
        groups["replayed"] = [r for r in counted if r.get("replayed")]
        groups["not replayed"] = [r for r in counted if not r.get("replayed")]
        groups["buffer rows left out"] = [r for r in counted if r.get("buffer_rows_used") is False
                                          and r["buffer"]]  # fmt: skip
    return {k: stats(v) for k, v in groups.items()}


def _write_csv(path: Path, rows: list[dict]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def _git_commit() -> str | None:
    if os.environ.get("JP_COMMIT"):
        return os.environ["JP_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _one_in_budget(args) -> tuple[dict, list[dict]]:
    seed, min_share_pct, cfg_fields, deadline, repeat_fraction = args
    if time.time() > deadline:
        return {"seed": seed, "error": "skipped: over --budget-s"}, []
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return one(int(seed), min_share_pct, cfg_fields, repeat_fraction)


def run_many(seeds, min_share_pct: float, cfg_fields: dict, budget_s: float, jobs=1, log=print,
             repeat_fraction: float = 0.0):  # fmt: skip
    """Every seed's run (until the budget is spent), `jobs` at a time: (run rows, phase rows)."""
    run_rows, phase_rows = [], []
    deadline = time.time() + budget_s
    tasks = [(int(s), min_share_pct, cfg_fields, deadline, repeat_fraction) for s in seeds]
    if jobs > 1:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(jobs)
        results = pool.imap(_one_in_budget, tasks)
    else:
        pool, results = None, map(_one_in_budget, tasks)
    for (seed, *_), (row, rows) in zip(tasks, results, strict=True):
        run_rows.append(row)
        if "error" in row and row["error"].startswith("skipped"):
            continue
        keys = ("run_s", "drift_rel", "buffer", "n_steps", "buffer_rows_used")
        settings = {k: row[k] for k in keys if k in row}
        phase_rows += [{**r, **settings} for r in rows]
        counted = [r for r in rows if r["counted"] and r["resolved"]]
        drift = 100 * row.get("drift_rel", 0)
        cpu = row.get("attribute_cpu_s", float("nan"))
        log(
            f"seed {seed}: {row.get('run_s', 0):.0f} s, drift {drift:.1f}%, "
            f"buffer {row.get('buffer')}, {cpu:.1f} s CPU; "
            f"covered {sum(r['covered'] for r in counted)}/{len(counted)}"
            + (f"; {row['error']}" if "error" in row else ""),
            flush=True,
        )
    if pool is not None:
        pool.close()
    return run_rows, phase_rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--runs", type=int, default=120, help="simulated runs (seeds seed..seed+runs-1)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=3000.0)
    ap.add_argument("--min-share-pct", type=float, default=2.0)
    ap.add_argument("--jobs", type=int, default=1, help="runs attributed at once (processes)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a RegressionConfig field for every run (e.g. min_rel_halfwidth=0.001)",
    )
    ap.add_argument(
        "--repeat",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="phase repetition: each run's phases replayable with chance 1/2 (at least one), "
        "each run twice with this chance in the steps of the run's first 75 %% (0: none)",
    )
    a = ap.parse_args(argv)
    cfg_fields = {}
    for item in a.set:
        k, _, v = item.partition("=")
        cfg_fields[k] = json.loads(v)
    a.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "gpu": None,
        "simulated": True,
        "command": " ".join(
            ["python3", "benchmarks/interval_coverage.py", *(argv or sys.argv[1:])]
        ),
        "config": cfg_fields,
    }
    t0 = time.monotonic()
    seeds = range(a.seed, a.seed + a.runs)
    run_rows, phase_rows = run_many(
        seeds, a.min_share_pct, cfg_fields, a.budget_s, a.jobs, repeat_fraction=a.repeat
    )
    summary = summarize(phase_rows)
    meta["elapsed_s"] = time.monotonic() - t0
    meta["n_runs_attributed"] = sum("error" not in r for r in run_rows)
    _write_csv(a.out / "runs.csv", run_rows)
    _write_csv(a.out / "phases.csv", phase_rows)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2))
    (a.out / "meta.json").write_text(json.dumps(meta, indent=2))
    head = ("group", "phases", "resolved", "coverage", "median ±%", "med |err|%")
    print("\n{:16s} {:>6s} {:>8s} {:>8s} {:>9s} {:>10s}".format(*head))
    for k, s in summary.items():
        cov = "—" if s["coverage"] is None else f"{100 * s['coverage']:.1f}%"
        hw = "—" if s["median_half_width_pct"] is None else f"{s['median_half_width_pct']:.2f}"
        er = "—" if s["median_abs_error_pct"] is None else f"{s['median_abs_error_pct']:.2f}"
        print(f"{k:16s} {s['n_phases']:6d} {s['n_resolved']:8d} {cov:>8s} {hw:>9s} {er:>10s}")


if __name__ == "__main__":
    main()
