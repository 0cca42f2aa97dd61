"""Simulated reference loops: issue-20-like loops on the package's simulated GPU, known truth.

A loop is phases of very different power and length on a fixed schedule (each phase's time
varies by ~1 % a step), run on the simulated GPU (`jouleprof.sensors.simulated`: the counter
and power fields refreshing every ~100 ms, a 25 ms instant window, a mJ counter) and read by
the real sampler, with NVML's power buffer (a sample every 20 ms, the kernel the regression
assumes). The phases are recorded by a real `PhaseRecorder` on a manual clock, so excitation
(`ExciteConfig`) puts its gaps exactly as on a GPU (a ``sync`` gap: the device idles).

`write_loop` writes what benchmarks/ref_loops.py writes for a GPU loop: fine/ (the measured
run) and ref/ (reference windows: idle, plain, alone:X, added:X), so benchmarks/ref_loops_eval.py
evaluates both alike. Every figure is simulated.

    PYTHONPATH=src python3 benchmarks/ref_loops_sim.py --out DIR [--fine-s 60] [--excite]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jouleprof.sensors.simulated_workload import PhaseSpec  # noqa: E402

WINDOW_COLUMNS = ("kind", "phase", "k", "n", "occ", "t0_s", "t1_s")


def _phase(name: str, ms: float, w: float) -> PhaseSpec:
    """A phase of `ms` milliseconds at `w` watts, its time varying ±1 % from step to step."""
    return PhaseSpec(name, 1e-3 * ms, w, duration_jitter=0.01)


@dataclass(frozen=True)
class SimLoop:
    name: str
    phases: tuple[PhaseSpec, ...]
    idle_w: float = 90.0
    between_ms: float = 0.0
    """Idle time between steps (a data-bound loop)."""
    notes: dict = field(default_factory=dict)
    removable_groups: tuple[str, ...] = ()
    """Groups the reference run also leaves out all at once (`Loop.removable_groups`)."""


SIM_LOOPS: dict[str, SimLoop] = {
    "user4": SimLoop(
        "user4",
        (
            _phase("gemm", 29.0, 850.0),
            _phase("copy", 15.0, 420.0),
            _phase("spin", 6.0, 160.0),
            _phase("tiny", 1.0, 230.0),
        ),
        removable_groups=("gemm+copy",),
    ),  # fmt: skip
    "bert_like": SimLoop(
        "bert_like",
        (
            _phase("forward", 17.0, 520.0),
            _phase("backward", 33.0, 610.0),
            _phase("optimizer", 2.0, 380.0),
        ),
        between_ms=6.0,
    ),  # fmt: skip
    "resnet_idle": SimLoop(
        "resnet_idle",
        (
            _phase("forward", 22.0, 560.0),
            _phase("backward", 41.0, 640.0),
            _phase("optimizer", 0.4, 300.0),
        ),
        between_ms=34.0,
    ),  # fmt: skip
}


class _Driver:
    """A power schedule and a manual clock that a PhaseRecorder records on."""

    def __init__(self, loop: SimLoop, seed: int) -> None:
        from jouleprof.clock import ManualClock
        from jouleprof.sensors.simulated import PowerSchedule

        self.loop = loop
        self.rng = np.random.default_rng([seed, 2020])
        self.sched = PowerSchedule(idle_w=loop.idle_w)
        self.clock = ManualClock()
        self.idle(1.0)
        self.truth: dict[str, list[float]] = {}

    def idle(self, s: float) -> None:
        self.clock.advance_s(s)
        self.catch_up()

    def catch_up(self) -> None:
        """Idle power from the schedule's end to now (a gap, a sleep)."""
        gap = self.clock.now_s() - self.sched.end_s
        if gap > 0:
            self.sched.append(gap, self.loop.idle_w)

    def run(self, ph: PhaseSpec, record: bool = True) -> None:
        self.catch_up()
        d = ph.duration_s * max(0.2, 1.0 + self.rng.normal(0.0, ph.duration_jitter))
        self.sched.append(d, ph.power_w)
        self.clock.advance_s(d)
        if record:
            self.truth.setdefault(ph.name, []).append(ph.power_w * d)


def sample_gpu(drv, rd, seed: int, model=None) -> tuple[float, np.random.Generator]:
    """Read a driver's simulated GPU (`drv.sched`, after a last second of idle) with the real
    sampler into samples.csv; (the schedule's end, the random stream the buffer continues)."""
    from jouleprof.clock import ManualClock
    from jouleprof.sensors.sampler import Sampler, SamplerConfig
    from jouleprof.sensors.simulated import SimulatedGPU

    drv.idle(1.0)
    end = drv.sched.end_s
    clock = ManualClock()
    kw = {} if model is None else {"model": model}
    gpu = SimulatedGPU(drv.sched, clock, seed=seed + 1, **kw)
    writer = rd.sample_writer()
    cfg = SamplerConfig(interval_s=0.02, counter_interval_s=0.1, counter_dense_s=0.0)
    sampler = Sampler([gpu], writer, cfg, clock=clock)
    sampler.mark_start()
    rng = np.random.default_rng([seed, 3])
    t, first = 0.0, True
    while t < end:
        clock.advance_s(max(t - clock.now_s(), 0.0))
        sampler.poll_once(force_counter=first or t + 0.025 >= end)
        first = False
        t += cfg.interval_s * float(rng.uniform(0.9, 1.1)) + float(rng.uniform(0, 0.003))
    sampler.flush()
    writer.close()
    return end, rng


def _sample(drv: _Driver, rd, seed: int, buffer: bool) -> None:
    """Read the simulated GPU with the real sampler into samples.csv (and power_buffer.csv)."""
    from interval_coverage import _buffer

    end, rng = sample_gpu(drv, rd, seed)
    if buffer:
        _buffer(drv.sched, rng, end).to_csv(rd.path / "power_buffer.csv", index=False)


def record_steps(loop, drv, recorder, fine_s: float, replayable=()) -> None:
    """`fine_s` seconds of the loop's steps, each phase run by the driver inside the
    recorder's step and phase (and the loop's idle between steps). Phases named in
    `replayable` run through `recorder.replay` (twice in the steps its `RepeatConfig` draws,
    each run its own span)."""
    t_end = drv.clock.now_s() + fine_s
    while drv.clock.now_s() < t_end:
        with recorder.step():
            for ph in loop.phases:
                if ph.name in replayable:
                    recorder.replay(ph.name, drv.run, ph)
                    continue
                with recorder.phase(ph.name):
                    drv.run(ph)
        if loop.between_ms:
            drv.idle(1e-3 * loop.between_ms)
    recorder.close()


def _new_run(path: Path, kind: str, extra: dict):
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import RunRecord, RunStatus

    rec = RunRecord(run_id=f"sim-{path.parent.name}-{path.name}", kind=kind, extra=extra)
    rd = RunDir.create(path, rec)
    return rd, rec, RunStatus


def write_fine(loop: SimLoop, path: Path, fine_s: float, seed: int = 0, excite=None,
               buffer: bool = True) -> dict:  # fmt: skip
    """The measured run: `fine_s` seconds of steps recorded by a PhaseRecorder."""
    from jouleprof.timeline.recorder import PhaseRecorder

    drv = _Driver(loop, seed)
    rd, rec, status = _new_run(path, "ref_loop_sim", {"simulated": True, "loop": asdict(loop)})
    sink = rd.span_writer()
    recorder = PhaseRecorder(drv.clock, sink, device="cpu", excite=excite, record=rec)
    record_steps(loop, drv, recorder, fine_s)
    _sample(drv, rd, seed, buffer)
    rec.extra["simulated_truth_j_per_occ"] = {k: float(np.mean(v)) for k, v in drv.truth.items()}
    rec.status = status.COMPLETE
    rd.write_record(rec)
    return rec.extra


def write_ref(loop: SimLoop, path: Path, ref_s: float = 2.5, seed: int = 0) -> list[dict]:
    """The reference windows of benchmarks/ref_loops.py, on the simulated GPU."""
    from jouleprof.timeline.recorder import PhaseRecorder

    drv = _Driver(loop, seed + 7)
    rd, rec, status = _new_run(path, "ref_loop_sim", {"simulated": True})
    recorder = PhaseRecorder(drv.clock, rd.span_writer(), device="cpu")
    rows: list[dict] = []
    cycle_ms = 1e3 * sum(p.duration_s for p in loop.phases)

    def window(kind, name, k, body):
        t0, n = drv.clock.now_s(), 0
        while n < 3 or drv.clock.now_s() - t0 < ref_s:
            body()
            n += 1
        rows.append(dict(zip(WINDOW_COLUMNS, (kind, name, k, n, 1, t0, drv.clock.now_s()),
                             strict=True)))  # fmt: skip
        drv.idle(0.3)

    def step(extra=None, skip=()):
        skip = {skip} if isinstance(skip, str) else set(skip)
        with recorder.step():
            for ph in loop.phases:
                if ph.name in skip:
                    continue
                with recorder.phase(ph.name):
                    for _ in range(1 + (extra or {}).get(ph.name, 0)):
                        drv.run(ph, record=False)

    t0 = drv.clock.now_s()
    drv.idle(1.5)
    rows.append(dict(zip(WINDOW_COLUMNS, ("idle", "", 0, 1, 0, t0, drv.clock.now_s()),
                         strict=True)))  # fmt: skip
    drv.idle(0.3)
    window("plain", "", 0, step)
    for ph in loop.phases:

        def alone(ph=ph):
            with recorder.step(), recorder.phase(ph.name):
                drv.run(ph, record=False)

        window("alone", ph.name, 0, alone)
        k = max(1, min(16, round(0.4 * cycle_ms / (1e3 * ph.duration_s))))
        window("added", ph.name, k, lambda ph=ph, k=k: step({ph.name: k}))
        window("removed", ph.name, 0, lambda ph=ph: step(skip=ph.name))
    for group in loop.removable_groups:
        window("removed", group, 0, lambda g=group: step(skip=set(g.split("+"))))
    window("plain", "", 0, step)
    recorder.close()
    _sample(drv, rd, seed + 7, buffer=True)
    with (rd.path / "ref_windows.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=WINDOW_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    rec.status = status.COMPLETE
    rd.write_record(rec)
    return rows


def write_loop(name: str, out: Path, fine_s: float, seed: int = 0, excite=None,
               ref: bool = True) -> Path:  # fmt: skip
    """loops/<name>/fine (and ref) under `out`, as ref_loops.py writes them."""
    loop = SIM_LOOPS[name.split("@")[0]]
    d = out / "loops" / name
    write_fine(loop, d / "fine", fine_s, seed, excite)
    if ref:
        write_ref(loop, d / "ref", seed=seed)
    return d


def main(argv: list[str] | None = None) -> int:
    from jouleprof.timeline.excite import ExciteConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fine-s", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loops", default=",".join(SIM_LOOPS))
    ap.add_argument("--excite", action="store_true", help="also each loop excited (@excite)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"simulated": True, "power_limit_w": 700.0, "command": " ".join(sys.argv)}
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    for name in args.loops.split(","):
        write_loop(name, args.out, args.fine_s, args.seed)
        if args.excite:
            ex = ExciteConfig(fraction=0.3, window_s=args.fine_s, seed=args.seed)
            write_loop(f"{name}@excite", args.out, args.fine_s, args.seed, excite=ex, ref=True)
        print(f"{name}: written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
