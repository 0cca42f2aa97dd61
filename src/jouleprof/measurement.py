"""`with jouleprof.measure(...) as m:` — measure anything into a run directory.

Opens the sensors, writes run.json (status running) at once, takes an idle baseline, samples in
the background while the body runs, and at the end computes the summary from samples.csv and
marks the run complete — or incomplete after Ctrl-C or an exception, with everything recorded so
far kept.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.clock import MonotonicClock
from jouleprof.errors import SensorError
from jouleprof.sensors.sampler import Sampler, SamplerConfig
from jouleprof.store.rundir import RunDir, new_run_id
from jouleprof.timeline.summary import Interval, run_summary
from jouleprof.types import Figure, RunRecord, RunStatus

log = logging.getLogger(__name__)

DEFAULT_RUNS_DIR = "jouleprof-runs"
TAIL_S = 0.3  # three refresh periods of NVML after the work ends


def _gpu_indices(name: str, value: Any) -> tuple[int, ...]:
    """`value` as a tuple of GPU indices (an integer is one GPU); ValueError naming `name`."""

    def index(i: Any) -> bool:
        return hasattr(i, "__index__") and not isinstance(i, bool)

    if index(value):
        value = (value,)
    if not (isinstance(value, tuple | list | range) and all(index(i) for i in value)):
        raise ValueError(f"{name} must be GPU indices such as (0,) or (0, 1), got {value!r}")
    if any(i < 0 for i in value):
        raise ValueError(f"{name} must be non-negative indices, got {list(value)}")
    return tuple(int(i) for i in value)


@dataclass(frozen=True)
class MeasureConfig:
    """What to measure and how often (CLI flags of `jouleprof measure` map onto these)."""

    gpus: tuple[int, ...] | None = None
    """User-visible GPU indices (as under CUDA_VISIBLE_DEVICES); None: every visible GPU."""
    hardware_gpus: tuple[int, ...] | None = None
    """GPUs described in run.json's hardware record; None: the measured ones (`gpus`). A run
    that samples no GPU but runs on some (a study's baseline and cross-check cells) names them
    here, so its record still says which GPUs ran it (its MFU needs their model)."""
    interval_s: float = 0.02
    """Period of the cheap sensor reads."""
    counter_interval_s: float = 5.0
    """Mean time between reads of a slow energy counter in the run's middle (its start and end
    are read every refresh). Each NVML counter read costs ~5 ms of CPU on an H200: every 5 s
    keeps `jouleprof measure`'s sampler at ~0.8 % of a core at 20 ms
    (benchmarks/results/sampler_cost); the e2e mode reads it about once a second, phase
    attribution (fine mode) about once per refresh (0.1)."""
    counter_dense_s: float = 10.0
    """For the first seconds of a run the counter is read every refresh whatever
    counter_interval_s says (and again just after the work ends): a short run's energy then
    rests on placeable counter readings; a long run pays that cost once."""
    slow_fields_period_s: float = 0.5
    """Seconds between reads of the GPUs' slow fields: NVML's average power, utilization,
    memory used, SM clock and temperature (the instant power is read every interval_s). They
    change slowly: the average is over 1 s, utilization and temperature drift, and the caching
    allocator's memory grows and stays, so peaks persist. Each set of these 5 NVML reads took
    the sampler's thread ~0.6 ms on the H200 host, where a poll runs cold after its sleep (hot
    it is 10 µs: benchmarks/results/nvml_read_cost): every 0.1 s that was ~0.6 % of a core,
    over half of the 20 ms sampler's 1.1 % (benchmarks/results/sampler_cost); every 0.5 s,
    ~0.1 %.
    A poll that reads the energy counter reads them too, so a run's edges have them every
    refresh. Phase attribution (fine mode) keeps 0.1 s, the refresh period."""
    idle_s: float = 1.0
    """Seconds of idle baseline sampled before the workload starts; 0 to skip."""
    rapl: bool = True
    """Also read CPU package/DRAM energy through Linux powercap where readable."""
    kind: str = "measure"
    """What produced the run, written to run.json."""
    power_buffer: bool = False
    """Also copy NVML's power-sample buffer (~20 ms samples) to power_buffer.csv, read once a
    second (`sensors.nvml_buffer`). The phase regression takes it as rows wherever it was
    recorded (`RegressionConfig.use_buffer`); fine mode records it."""
    simulate_gpu_w: float | None = None
    """Testing aid: also measure a simulated GPU ("sim0") drawing this constant power through
    the realistic sensor model, so the whole path can be exercised on a machine without a GPU."""

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0 (got {self.interval_s}); try 0.02")
        if not self.counter_interval_s > 0:
            raise ValueError(f"counter_interval_s must be > 0 (got {self.counter_interval_s})")
        if not 0 < self.slow_fields_period_s < math.inf:
            raise ValueError(
                f"slow_fields_period_s must be a finite number of seconds > 0 "
                f"(got {self.slow_fields_period_s}); "
                "try 0.5 (0.1 for phase attribution)"
            )
        if self.counter_dense_s < 0:
            raise ValueError(f"counter_dense_s must be ≥ 0 (got {self.counter_dense_s})")
        if self.idle_s < 0:
            raise ValueError(f"idle_s must be ≥ 0 (got {self.idle_s})")
        if self.simulate_gpu_w is not None and self.simulate_gpu_w < 0:
            raise ValueError(f"simulate_gpu_w must be ≥ 0 watts, got {self.simulate_gpu_w}")
        for name in ("gpus", "hardware_gpus"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _gpu_indices(name, value))

    @property
    def described_gpus(self) -> tuple[int, ...] | None:
        """The GPUs the hardware record describes (None: every visible GPU)."""
        return self.gpus if self.hardware_gpus is None else self.hardware_gpus


@dataclass
class Measurement:
    """A measurement in progress, then done: its run directory, clock and record."""

    run_dir: RunDir
    record: RunRecord
    clock: MonotonicClock
    sampler: Sampler
    devices: list[str]
    unavailable_notes: list[str]
    work: Interval | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Figure]:
        return self.record.summary

    def span_writer(self):
        """A writer of spans.csv for the phase recorder (same clock as samples.csv)."""
        return self.run_dir.span_writer()


def _machine_records(gpus: Sequence[int] | None) -> tuple[dict, dict, dict]:
    from jouleprof.hardware import (
        environment_record,
        git_record,
        hardware_record,
        inherited_git_record,
    )

    git = inherited_git_record(Path.cwd()) or git_record(Path.cwd())
    return hardware_record(gpus), environment_record(), git


def _simulated_gpu(power_w: float, clock: MonotonicClock):
    from jouleprof.sensors.simulated import PowerSchedule, SimulatedGPU

    schedule = PowerSchedule(idle_w=power_w)
    schedule.append(7 * 24 * 3600.0, power_w)  # a week of constant draw
    return SimulatedGPU(schedule, clock, device="sim0")


def _gpu_sharing(sensors: list, when: str) -> dict[str, Any]:
    """Other processes on the measured GPUs at `when` (a run beside another one is disturbed)."""
    from jouleprof.sensors.nvml import NvmlSensor, gpu_processes

    nv = [s for s in sensors if isinstance(s, NvmlSensor)]
    if not nv:
        return {"when": when, "checked": False, "reason": "no NVIDIA GPU measured"}
    try:
        procs = gpu_processes(nv[0])
    except SensorError as e:
        return {"when": when, "checked": False, "reason": str(e)}
    others = [p for p in procs if not p["own"]]
    return {"when": when, "checked": True, "other_processes": others}


@contextmanager
def measure(
    out: str | os.PathLike[str] | None = None,
    config: MeasureConfig | None = None,
    *,
    run_config: dict[str, Any] | None = None,
    **overrides: Any,
) -> Iterator[Measurement]:
    """Measure the body of the `with` block into a run directory.

    Args:
        out: the run directory to create; None: jouleprof-runs/<run_id>.
        config: a MeasureConfig; keyword overrides (gpus=..., interval_s=...) replace its fields.
        run_config: what the caller ran (command, workload config), stored in run.json.

    Yields:
        A Measurement. After the block, `m.summary` holds the figures and `m.run_dir` the files.
    """
    from jouleprof.sensors.discover import open_sensors

    cfg = config or MeasureConfig()
    if overrides:
        cfg = MeasureConfig(**{**asdict(cfg), **overrides})
    run_id = new_run_id(cfg.kind)
    path = Path(out) if out is not None else Path(DEFAULT_RUNS_DIR) / run_id
    from jouleprof.distributed.hook import rank_plan

    plan = rank_plan(out, path, cfg)  # under torchrun: this rank's directory and GPU; else None
    if plan is not None:
        path, cfg = plan.path, plan.config
    discovery = open_sensors(
        list(cfg.gpus) if cfg.gpus is not None else None,
        rapl=cfg.rapl,
        gpu_slow_period_s=cfg.slow_fields_period_s,
    )
    try:
        hardware, environment, git = _machine_records(cfg.described_gpus)
        record = RunRecord(
            run_id=run_id,
            kind=cfg.kind,
            config={"measure": asdict(cfg), **(run_config or {})},
            hardware=hardware,
            environment=environment,
            git=git,
            notes=list(discovery.notes),
        )
        run_dir = RunDir.create(path, record)
        clock = MonotonicClock()
        sensors = list(discovery.sensors)
        if cfg.simulate_gpu_w is not None:
            sensors.append(_simulated_gpu(cfg.simulate_gpu_w, clock))
        if plan is not None:
            sensors.extend(plan.sensors(clock))
        writer = run_dir.sample_writer()
        scfg = SamplerConfig(
            interval_s=cfg.interval_s,
            counter_interval_s=cfg.counter_interval_s,
            counter_dense_s=cfg.counter_dense_s,
            # A burst of per-refresh counter reads (1 s) keeps its grid located where reads
            # are otherwise sparse: every 30 s at ~1 read/s, every 60 s when sparser
            # (~0.1 % of a core on an H200).
            counter_burst_every_s=(
                None
                if cfg.counter_interval_s <= 0.5
                else 30.0
                if cfg.counter_interval_s < 2.0
                else 60.0
            ),
        )
        sampler = Sampler(sensors, writer, scfg, clock=clock)
        m = Measurement(run_dir, record, clock, sampler, sampler.devices, list(discovery.notes))
        record.extra["gpu_sharing"] = [_gpu_sharing(discovery.sensors, "start")]
        status = RunStatus.INCOMPLETE
        sampler.start()
        buffer = None
        idle = None
        try:
            buffer = _power_buffer(cfg, discovery.sensors, clock, run_dir.path, record)
            if cfg.idle_s > 0 and sampler.devices:
                t0 = clock.now_s()
                clock.sleep_s(cfg.idle_s)
                idle = Interval(t0, clock.now_s())
            t_work0 = clock.now_s()
            try:
                yield m
                status = RunStatus.COMPLETE
            except KeyboardInterrupt as e:
                from jouleprof.interrupts import interrupt_note

                record.notes.append(interrupt_note(e))
                raise
            except BaseException as e:
                record.notes.append(f"the measured code raised {type(e).__name__}: {e}")
                raise
            finally:
                m.work = Interval(t_work0, clock.now_s())
                if sampler.devices and status is not RunStatus.INCOMPLETE:
                    # Counters move only at refreshes: sample a little past the end, reading the
                    # counter at every refresh, so refreshes after it bracket the work's end.
                    sampler.densify(TAIL_S, read_now=True)
                    clock.sleep_s(TAIL_S)
        finally:
            if buffer is not None:
                record.extra["power_buffer"] = buffer.stop()
            sampler.stop()
            writer.close()
            record.extra["gpu_sharing"].append(_gpu_sharing(discovery.sensors, "end"))
            _finish(m, idle, status, discovery)
            if plan is not None:
                plan.finish(m)  # rank report; rank 0 writes the job's reduced run.json
    finally:
        discovery.close()


def _power_buffer(cfg: MeasureConfig, sensors, clock, path: Path, record: RunRecord):
    """A PowerBufferRecorder over the measured NVIDIA GPUs when asked for; None otherwise (with
    a note saying why when it was asked for)."""
    if not cfg.power_buffer:
        return None
    from jouleprof.sensors.nvml import NvmlSensor
    from jouleprof.sensors.nvml_buffer import POWER_BUFFER_CSV, PowerBufferRecorder

    nvml = [s for s in sensors if isinstance(s, NvmlSensor)]
    if not nvml:
        record.notes.append("power buffer not recorded: no NVIDIA GPU is measured")
        return None
    handles = {d: s.handle(d) for s in nvml for d in s.devices}
    return PowerBufferRecorder(nvml[0].nv, handles, clock, path / POWER_BUFFER_CSV)


def _finish(m: Measurement, idle: Interval | None, status: RunStatus, discovery) -> None:
    record = m.record
    record.extra["sampler"] = m.sampler.stats.to_json()
    if m.work is not None:
        record.extra["work_interval_s"] = [m.work.t0_s, m.work.t1_s]
    if idle is not None:
        record.extra["idle_interval_s"] = [idle.t0_s, idle.t1_s]
    disturbed = any(g.get("other_processes") for g in record.extra.get("gpu_sharing", []))
    record.extra["disturbed"] = disturbed
    if disturbed:
        record.notes.append("other processes used a measured GPU: figures are disturbed")
    try:
        samples = m.run_dir.read_samples() if m.devices else None
        work = m.work or Interval(0.0, 0.0)
        if samples is not None and len(samples):
            record.summary = run_summary(samples, m.devices, work, idle)
        else:
            record.summary = {"wall_time_s": Figure.measured(work.duration_s, "s", signal="timer")}
        for prefix, key in (("gpu", "gpu_energy_j"), ("cpu", "cpu_energy_j")):
            # (a simulated "sim0" device is reported under its own name only)
            if not any(d.startswith(prefix) for d in m.devices):
                why = [i.reason for i in discovery.unavailable if i.device.startswith(prefix)]
                reason = "; ".join(r for r in why if r) or f"no {prefix.upper()} sensor was opened"
                record.summary[key] = Figure.unavailable("J", reason)
    except Exception as e:  # the summary must never lose the raw data
        log.exception("summarizing the run failed")
        record.notes.append(f"summary failed ({type(e).__name__}: {e}); raw CSVs are intact")
    exit_code = record.extra.get("exit_code")
    if status is RunStatus.COMPLETE and exit_code not in (None, 0):
        status = RunStatus.FAILED
    record.status = status
    m.run_dir.write_record(record)
