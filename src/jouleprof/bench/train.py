"""One training cell: a workload trained under one measurement mode, into one run directory.

The flow of a cell (`run_cell`):

1. warm-up, unrecorded, until step times settle (`WarmupRule`);
2. the measured segment: `duration_s` of training (or `steps`), with the mode's instruments —
   baseline: none; e2e: the energy counter about once a second and coarse telemetry; fine: the
   phase recorder (CUDA events) and the sampler at 20 ms with the counter read every refresh;
3. fine mode only: the overhead segment — blocks of steps with and without the phase recorder,
   interleaved in the same process on one replayed batch (`bench.overhead`), and optionally
   the isolation segment — each phase replayed alone for seconds (`bench.isolation`), the
   reference for attribution;
4. after the run, from the recorded files alone: throughput, energy per sample, MFU, phase
   attribution (proportional and regression, isolation where replayed), all in run.json.

A CUDA out-of-memory error ends the cell as failed with `extra["oom"] = True`, data kept.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from jouleprof.bench.modes import Mode
from jouleprof.bench.warmup import WarmupRule
from jouleprof.timeline.markers import NullRecorder

log = logging.getLogger(__name__)

STEPS_CSV = "steps.csv"
OVERHEAD_SPANS_CSV = "overhead_spans.csv"
STEP_COLUMNS = ("step", "segment", "host_t1_s", "host_step_s", "samples", "recorded")
MODES = tuple(m.value for m in Mode)


@dataclass(frozen=True)
class CellConfig:
    """What one cell trains and how it is measured (CLI flags of `jouleprof profile`)."""

    workload: str = "vjepa2"
    """Registered workload name (see `jouleprof.workloads.registry`)."""
    preset: str = "tiny"
    """The workload's preset: vit_huge, vit_large, vit_base, tiny."""
    batch_size: int | None = None
    """Per-step batch size; None: the preset's."""
    mode: str = "fine"
    """baseline, e2e, fine, codecarbon or zeus."""
    duration_s: float | None = 30.0
    """Length of the measured segment in seconds (or give `steps`)."""
    steps: int | None = None
    """Length of the measured segment in steps (overrides duration_s)."""
    data: str = "fake"
    """'fake' (FakeVideo: clips synthesized once, then really decoded every epoch), a folder of
    clips, or a CSV of paths."""
    num_workers: int | None = None
    """Data-loader workers; None: the preset's."""
    overhead_pairs: int = 0
    """Fine mode: pairs of interleaved recorded/unrecorded blocks measuring the overhead."""
    overhead_block_steps: int = 8
    """Steps per overhead block."""
    isolation_s: float = 0.0
    """Fine mode: > 0 replays each phase alone for this long (the attribution reference)."""
    isolation_repeats: int = 1
    """Rounds of the isolation replays, interleaved (`IsolationConfig.repeats`)."""
    excite: bool = False
    """Fine mode: opt-in excitation (`timeline.excite.ExciteConfig`'s defaults: sync gaps of
    0.5-5 ms before the top-level phases of 25 % of the steps in the first 30 s), so that
    phases a fixed schedule leaves collinear can be told apart; attribution reports its
    cost (docs/excitation.md)."""
    fixed_batch: bool = False
    """Train the measured segment on one batch over and over (identical work every step), for
    attribution benchmarks: a workload whose steps vary (V-JEPA2's masks change the context
    length every batch) is then compared with isolation replays of that same batch. Off for
    studies, which measure training as it is."""
    power_buffer: bool | None = None
    """Record NVML's ~20 ms power-sample buffer (power_buffer.csv). None: as the mode does
    (fine mode records it, for the phase regression's rows; the others do not)."""
    gpus: tuple[int, ...] | None = None
    """GPU indices to measure; None: the one the workload trains on (every visible GPU when
    the workload cannot say)."""
    interval_s: float = 0.02
    """Sampler interval in fine mode."""
    warmup: WarmupRule = field(default_factory=WarmupRule)
    overrides: dict[str, Any] = field(default_factory=dict)
    """Workload config fields to change (activation_checkpointing, compile, optimizer_impl,
    grad_accum_steps, ...)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.steps is None and (self.duration_s is None or self.duration_s <= 0):
            raise ValueError("give duration_s > 0 or steps ≥ 1")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be ≥ 1, got {self.steps}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {self.batch_size}")
        if self.overhead_pairs == 1 or self.overhead_pairs < 0 or self.overhead_block_steps < 1:
            raise ValueError(
                "overhead_pairs must be 0 (no overhead blocks) or ≥ 2, and overhead_block_steps ≥ 1"
            )
        if self.isolation_s < 0:
            raise ValueError(f"isolation_s must be ≥ 0, got {self.isolation_s}")
        if self.isolation_repeats < 1:
            raise ValueError(f"isolation_repeats must be ≥ 1, got {self.isolation_repeats}")
        if self.mode != "fine" and (self.overhead_pairs or self.isolation_s or self.excite):
            raise ValueError("overhead_pairs, isolation_s and excite need mode 'fine'")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = list(self.gpus) if self.gpus is not None else None
        return d


class SwitchableMarker:
    """A PhaseMarker that forwards to the recorder only while `active` (overhead blocks)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.active = True
        self._null = NullRecorder()

    def step(self):
        return (self.inner if self.active else self._null).step()

    def phase(self, name: str):
        return (self.inner if self.active else self._null).phase(name)

    def replay(self, name: str, fn, *args, **kwargs):
        return (self.inner if self.active else self._null).replay(name, fn, *args, **kwargs)


@dataclass
class _StepLog:
    writer: Any
    t_origin_ns: int
    n: int = 0

    def add(self, segment: str, step_s: float, samples: int, recorded: bool) -> None:
        t1 = (time.perf_counter_ns() - self.t_origin_ns) / 1e9
        self.writer.write_rows([(self.n, segment, t1, step_s, samples, int(recorded))])
        self.n += 1


def run_cell(cfg: CellConfig, out: str | Path) -> Path:
    """Run one cell into the run directory `out` (created); returns its path.

    Raises:
        ValueError / JouleprofError: bad configuration (nothing is created).
    """
    from jouleprof.bench.cellsummary import finish_cell
    from jouleprof.bench.modes import require
    from jouleprof.measurement import measure
    from jouleprof.store.rundir import CsvAppender
    from jouleprof.workloads import registry as workloads

    t_enter = time.perf_counter()
    process_age_s = _process_age_s()  # interpreter start and imports, before this call
    require(cfg.mode)
    wl = workloads.get(cfg.workload)
    wconfig = wl.config(cfg.preset, cfg.batch_size, cfg.num_workers, cfg.overrides)
    run_config = {"cell": cfg.to_json(), "workload": wl.describe(wconfig)}
    out = Path(out)
    mode = Mode.parse(cfg.mode)
    # The GPUs measured: those asked for, else the one the workload trains on (on a machine
    # with several, the idle ones would otherwise be counted in its energy per sample).
    gpus = cfg.gpus if cfg.gpus is not None else wl.gpus()
    mcfg = mode.measure_config(gpus, cfg.interval_s)
    if cfg.power_buffer is not None:
        mcfg = replace(mcfg, power_buffer=cfg.power_buffer)
    with measure(out, mcfg, run_config=run_config) as m:
        rec = m.record
        # Where the cell's wall time went, each part in seconds: before this function
        # (process start), opening the measurement (sensors, hardware record, idle
        # baseline), then the laps of _train, then closing it and the cell's analysis.
        rec.extra["timing_s"] = {
            "process_start": process_age_s,
            "open": round(time.perf_counter() - t_enter, 3),
        }
        rec.extra["mode"] = cfg.mode
        rec.extra["trained_on"] = str(wl.device())  # "cpu" or "cuda": which device trained
        rec.notes.append(cfg.warmup.describe())
        steps_log = _StepLog(
            CsvAppender(m.run_dir.path / STEPS_CSV, STEP_COLUMNS), m.clock.origin_ns
        )
        try:
            _train(cfg, wl, wconfig, m, steps_log)
        except Exception as e:
            if wl.is_oom(e):
                rec.extra["oom"] = True
                rec.extra["exit_code"] = 1
                rec.notes.append(f"out of memory at batch size {wconfig.batch_size}: {e}")
                log.warning("cell ran out of memory: %s", e)
            else:
                raise
        finally:
            steps_log.writer.close()
        t_exit = time.perf_counter()
    finish_cell(out, timing_s={"close": round(time.perf_counter() - t_exit, 3)})
    return out


def _compiled_graphs(session) -> int | None:
    """Graphs torch.compile has compiled so far in this process (None: the workload compiles
    nothing, or cannot say)."""
    fn = getattr(session, "compiled_graphs", None)
    return fn() if fn is not None else None


def _record_compiles(rec, before: int | None, warmed: int | None, after: int | None) -> None:
    """run.json extra["compiled_graphs"]: graphs compiled in the warm-up and in the measured
    segment; a recompilation inside the segment is in its time and energy, and a note says so."""
    if before is None or warmed is None or after is None:
        return
    measured = after - warmed
    rec.extra["compiled_graphs"] = {"warmup": warmed - before, "measured": measured}
    if measured > 0:
        rec.notes.append(
            f"torch.compile compiled {measured} graph(s) during the measured segment: their "
            "compile time and energy are in its figures (a shape the warm-up did not see); "
            "measure longer, or raise the warm-up's minimum steps"
        )


EDGE_DENSE_S = 1.0
"""Seconds of counter reads at every refresh from each edge of the measured segment. Between
edges the e2e mode reads the counter about once a second; on the H200 its segment energies
then carried ±11–29 % intervals at 6 s (benchmarks/results/study_vith), the edges falling up
to a second from a read. ~10 reads an edge place both within a refresh (100 ms)."""


def _dense_edge(m) -> None:
    if m.sampler.devices:
        m.sampler.densify(EDGE_DENSE_S, read_now=True)


END_LEAD_S = 0.5
"""Seconds before the measured segment's end from which the counter is read at every refresh.
The reading taken right at the end cannot bound the segment alone: the counter it reads last
moved up to a refresh (100 ms) earlier, and the read before it was up to a second earlier in
e2e mode, which left 5 of 42 e2e/fine cells with ±6–32 % intervals on the H200
(benchmarks/results/study_vith_f33ed69)."""


def _dense_lead_s(
    steps_done: int,
    elapsed_s: float,
    steps_total: int | None,
    duration_s: float,
    dense_until_s: float | None,
) -> float | None:
    """Seconds of dense counter reads to ask for now, or None: once the end is near
    (`_end_is_near`), END_LEAD_S and two mean steps; again whenever the segment runs on into
    the last half of END_LEAD_S of that stretch (a step slower than the mean, as on a loaded
    machine, would otherwise end the segment after the dense reads had stopped)."""
    if not _end_is_near(steps_done, elapsed_s, steps_total, duration_s):
        return None
    if dense_until_s is not None and elapsed_s < dense_until_s - 0.5 * END_LEAD_S:
        return None
    return END_LEAD_S + 2 * elapsed_s / steps_done


def _end_is_near(
    steps_done: int, elapsed_s: float, steps_total: int | None, duration_s: float
) -> bool:
    """Whether the segment may end within END_LEAD_S after the step about to start.

    A segment ends after `steps_total` steps, or else after the first step that finishes past
    `duration_s`; the mean step so far predicts when.
    """
    if steps_done <= 0:
        return False
    step_s = elapsed_s / steps_done
    if steps_total is not None:
        remaining_s = (steps_total - steps_done) * step_s
    else:
        remaining_s = duration_s - elapsed_s
    return remaining_s <= END_LEAD_S + step_s


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), None where that cannot be read."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return round(uptime_s - ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


def _train(cfg: CellConfig, wl, wconfig, m, steps_log: _StepLog) -> None:
    rec = m.record
    timing = rec.extra.setdefault("timing_s", {})  # where the cell's wall time went
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        timing[name] = round(now - mark, 3)
        mark = now

    recorder = None
    if cfg.mode == "fine":
        from jouleprof.timeline.excite import ExciteConfig
        from jouleprof.timeline.recorder import PhaseRecorder

        recorder = PhaseRecorder(
            m.clock,
            m.span_writer(),
            device=wl.device(),
            record=rec,
            excite=ExciteConfig() if cfg.excite else None,
        )
    marker = SwitchableMarker(recorder if recorder is not None else NullRecorder())
    session = wl.session(wconfig, marker, cfg.data)
    try:
        _segments(cfg, session, m, marker, recorder, steps_log, lap)
    finally:
        session.close()
        lap("teardown")


def _segments(cfg: CellConfig, session, m, marker, recorder, steps_log: _StepLog, lap) -> None:
    from jouleprof.bench.modes import crosscheck
    from jouleprof.bench.overhead import OverheadConfig, interleaved_overhead

    rec = m.record
    lap("setup")
    if getattr(session, "setup_timing_s", None):
        rec.extra["setup_timing_s"] = session.setup_timing_s
    rec.extra["workload_facts"] = session.facts()
    lap("facts")

    # 1. warm-up, unrecorded: one step on real data, then the first batch again until step
    # times settle (a workload whose batches vary in size, as V-JEPA2's masks make them,
    # would otherwise never look settled), while the data loader's workers fill up.
    marker.active = False
    times: list[float] = []
    wait0_s = getattr(session, "data_wait_s", None)
    # A compiled workload warms up on real batches: replaying one batch shows torch.compile a
    # single shape, and the first new one recompiled inside the measured segment (a 58 s step
    # on the H200, benchmarks/results/options_vith_b8).
    real_batches = bool(getattr(session, "warmup_on_real_batches", False))
    rec.notes.append(
        "the warm-up trains on real batches (compiled graphs must meet several shapes)"
        if real_batches
        else "the warm-up's first step trains on real data, the rest replay that batch"
    )
    graphs0 = _compiled_graphs(session)
    while not cfg.warmup.settled(times):
        t = session.step(sync=True, fixed=bool(times) and not real_batches)
        if not times:  # the first step: lazy CUDA set-up, allocation, and the first batch
            rec.extra["warmup_first_step"] = {
                "s": round(t, 3),
                "data_wait_s": None if wait0_s is None else round(session.data_wait_s - wait0_s, 3),
            }
        times.append(t)
        steps_log.add("warmup", t, session.samples_per_step, False)
    rec.extra["warmup_steps"] = len(times)
    rec.extra["warmup_settled"] = len(times) < cfg.warmup.max_steps
    graphs1 = _compiled_graphs(session)
    lap("warmup")

    # 2. the measured segment
    marker.active = True
    # A cross-check tool's window opens before the segment's clock starts: opening it costs
    # seconds (ZeusMonitor's set-up took 2.2 s on the H200, which the segment's timer counted
    # as training time: a third of the throughput lost, results/study_cells_f33ed69), and the
    # tool times its own window.
    cross = (
        crosscheck(cfg.mode, m.run_dir.path, cfg.gpus)
        if cfg.mode in ("codecarbon", "zeus")
        else nullcontext()
    )
    with cross as cc:
        session.sync()
        _dense_edge(m)
        wait0_s = getattr(session, "data_wait_s", None)  # a workload that cannot say: None
        t0_ns = time.perf_counter_ns()
        n = 0
        sampling = bool(m.sampler.devices)  # baseline and cross-check modes sample nothing
        dense_until_s = None  # the segment's elapsed time until which the counter reads densely
        while True:
            t = session.step(sync=False, fixed=cfg.fixed_batch)
            n += 1
            steps_log.add(
                "measured", t, session.samples_per_step, marker.active and recorder is not None
            )
            elapsed = (time.perf_counter_ns() - t0_ns) / 1e9
            if (cfg.steps is not None and n >= cfg.steps) or (
                cfg.steps is None and elapsed >= cfg.duration_s
            ):
                break
            lead_s = _dense_lead_s(n, elapsed, cfg.steps, cfg.duration_s, dense_until_s)
            if sampling and lead_s is not None:
                m.sampler.densify(lead_s)  # reads before the end, too
                dense_until_s = elapsed + lead_s
        session.sync()
        t1_ns = time.perf_counter_ns()
        _dense_edge(m)
    seg = [m.clock.to_clock_s(t0_ns), m.clock.to_clock_s(t1_ns)]
    rec.extra["measured_segment"] = {
        "t0_s": seg[0],
        "t1_s": seg[1],
        "steps": n,
        "samples": n * session.samples_per_step,
        "first_recorded_step": 0 if recorder is not None else None,
        "data_wait_s": None if wait0_s is None else session.data_wait_s - wait0_s,
    }
    lap("measured")
    _record_compiles(rec, graphs0, graphs1, _compiled_graphs(session))
    if cc is not None:
        rec.extra["crosscheck"] = cc.to_json()
    if recorder is not None:
        # spans.csv holds the measured segment alone: the overhead blocks record elsewhere.
        recorder.close()
        rec.extra["measured_segment"]["last_recorded_step"] = n - 1

    # 3. fine mode: overhead blocks, then isolation replays
    if cfg.overhead_pairs:
        from jouleprof.store.rundir import SpanWriter
        from jouleprof.timeline.recorder import PhaseRecorder

        marker.inner = PhaseRecorder(
            m.clock, SpanWriter(m.run_dir.path / OVERHEAD_SPANS_CSV), device=session.device
        )
        t_ov0 = m.clock.now_s()

        def run_block(instrumented: bool, n_steps: int) -> list[float]:
            # Timed on the host between two synchronizations, on the same batch in both arms:
            # batches that vary in size would bury a 0.5 % difference in their own spread.
            marker.active = instrumented
            session.sync()
            t0 = time.perf_counter()
            for _ in range(n_steps):
                t = session.step(sync=False, fixed=True)
                steps_log.add("overhead", t, session.samples_per_step, instrumented)
            session.sync()
            return [(time.perf_counter() - t0) / n_steps] * n_steps

        res = interleaved_overhead(
            run_block,
            OverheadConfig(
                blocks=cfg.overhead_pairs, steps_per_block=cfg.overhead_block_steps, drop_first=0
            ),
        )
        marker.active = True
        marker.inner.close()
        rec.extra["overhead"] = res.to_json()
        rec.extra["overhead_segment"] = {"t0_s": t_ov0, "t1_s": m.clock.now_s()}
        lap("overhead")
    if cfg.isolation_s > 0:
        from jouleprof.bench.isolation import IsolationConfig, run_isolation_in

        windows = run_isolation_in(
            m,
            session.replays(),
            IsolationConfig(duration_s=cfg.isolation_s, repeats=cfg.isolation_repeats),
        )
        rec.extra["isolation_windows"] = [w.row() for w in windows]
        lap("isolation")
    rec.extra["peak_mem_allocated_bytes"] = session.peak_memory_bytes()
