"""Measurement modes: the same run, measured in one of five ways.

* ``baseline``: no instrumentation at all (no sampler, `NullRecorder`), for overhead;
* ``e2e``: end-to-end energy: the counter about once a second and telemetry every 0.5 s,
  the lightest measurement that still has the counter on both sides of the run's edges;
* ``fine``: the sampler at 20 ms with the counter read every refresh, and a `PhaseRecorder`
  marking phases;
* ``codecarbon``, ``zeus``: an independent tool's end-to-end GPU energy, as a cross-check;
  available only where that package imports. A sweep records such a cell as unavailable
  (`unavailable_cell`) rather than failing.

The cross-check wrappers write nothing outside the run directory and reach no network:
CodeCarbon runs offline with file output off, Zeus with no log file.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from jouleprof.errors import JouleprofError
from jouleprof.extras import install_line
from jouleprof.timeline.markers import NullRecorder

log = logging.getLogger(__name__)

J_PER_KWH = 3.6e6


class ModeUnavailable(JouleprofError, ImportError):
    """A mode's package is not installed here."""

    def __init__(self, mode: Mode, package: str) -> None:
        self.mode = mode
        self.package = package
        super().__init__(
            f"mode {mode.value!r} needs {package}, which is not installed: {install_line(package)}"
        )


class Mode(StrEnum):
    """How a run is measured."""

    BASELINE = "baseline"
    E2E = "e2e"
    FINE = "fine"
    CODECARBON = "codecarbon"
    ZEUS = "zeus"

    @classmethod
    def parse(cls, value: str | Mode) -> Mode:
        """The mode named `value` (case-insensitive); ValueError listing the modes otherwise."""
        if isinstance(value, Mode):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown mode {value!r}: choose one of {allowed}") from None

    @property
    def sampler(self) -> str:
        """ "none", "coarse" (counter ~1/s, telemetry 0.5 s) or "continuous" (20 ms, counter
        every refresh)."""
        return {Mode.E2E: "coarse", Mode.FINE: "continuous"}.get(self, "none")

    def measure_config(self, gpus: Sequence[int] | None = None, interval_s: float = 0.02) -> Any:
        """How `jouleprof.measure` samples in this mode (jouleprof's own sensors are off in
        baseline and in the cross-check modes, which measure with their own tools).

        Args:
            gpus: the GPUs the workload runs on (None: every visible GPU, or cannot say).
            interval_s: fine mode's sampling interval.
        """
        from jouleprof.measurement import MeasureConfig

        gpus = tuple(gpus) if gpus is not None else None
        if self is Mode.FINE:
            # The slow fields every refresh period: phase attribution's regression can use the
            # average power readings as rows (RegressionConfig.use_average).
            return MeasureConfig(
                gpus=gpus,
                interval_s=interval_s,
                counter_interval_s=0.1,
                slow_fields_period_s=0.1,
                idle_s=1.0,
                kind="cell",
                # NVML's 20 ms power buffer: rows for the regression, 0.35 ms of CPU a second.
                power_buffer=True,
            )
        if self is Mode.E2E:
            return MeasureConfig(
                gpus=gpus, interval_s=0.5, counter_interval_s=1.0, idle_s=1.0, kind="cell"
            )
        # Nothing is sampled, but the hardware record names the workload's GPUs (their model
        # gives the cell's MFU); when it cannot say which, none ("no GPU measured in this run").
        return MeasureConfig(gpus=(), hardware_gpus=gpus, rapl=False, idle_s=0.0, kind="cell")

    @property
    def records_phases(self) -> bool:
        return self is Mode.FINE

    @property
    def package(self) -> str | None:
        """The package a cross-check mode needs (its pip name)."""
        return {Mode.CODECARBON: "codecarbon", Mode.ZEUS: "zeus"}.get(self)


def unavailable_reason(mode: Mode | str) -> str | None:
    """None if `mode` can run here, else why not (without importing anything heavy)."""
    m = Mode.parse(mode)
    if m.package is None:
        return None
    if importlib.util.find_spec(m.package) is None:
        return f"{m.package} is not installed: {install_line(m.package)}"
    return None


def require(mode: Mode | str) -> Mode:
    """The mode, checked to be runnable here.

    Raises:
        ValueError: an unknown mode.
        ModeUnavailable: its package is missing.
    """
    m = Mode.parse(mode)
    if unavailable_reason(m) is not None:
        raise ModeUnavailable(m, m.package or "")
    return m


def unavailable_cell(mode: Mode | str, reason: str) -> dict[str, Any]:
    """The row a sweep records for a cell whose mode cannot run: no figures, the reason."""
    return {"mode": Mode.parse(mode).value, "status": "unavailable", "reason": reason}


def make_marker(mode: Mode | str, clock: Any = None, sink: Any = None, **recorder_kw: Any) -> Any:
    """The `PhaseMarker` a mode's workload marks phases through.

    Args:
        mode: the measurement mode.
        clock, sink: for ``fine``: the run's clock and a span sink (`m.span_writer()`).
        recorder_kw: passed to `PhaseRecorder` (device=, sync=, record=, ...).
    """
    m = Mode.parse(mode)
    if not m.records_phases:
        return NullRecorder()
    if clock is None:
        raise ValueError("mode 'fine' needs the run's clock to stamp phases on")
    from jouleprof.timeline.recorder import PhaseRecorder

    return PhaseRecorder(clock, sink, **recorder_kw)


@dataclass
class CrossCheck:
    """An independent tool's end-to-end figure, filled in when its context exits."""

    tool: str
    gpu_energy_j: float | None = None
    duration_s: float | None = None
    reason: str | None = None
    """Why gpu_energy_j is None, if it is."""
    per_gpu_j: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "gpu_energy_j": self.gpu_energy_j,
            "duration_s": self.duration_s,
            "reason": self.reason,
            "per_gpu_j": self.per_gpu_j,
            "raw": self.raw,
        }


def _accepted(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Only the keyword arguments `fn` takes (the tools' signatures change across versions)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


@contextmanager
def codecarbon_tracker(
    out_dir: str | os.PathLike[str],
    gpu_ids: Sequence[int] | None = None,
    *,
    country_iso_code: str = "USA",
    measure_power_secs: float = 1.0,
) -> Iterator[CrossCheck]:
    """CodeCarbon's `OfflineEmissionsTracker` around the block: its GPU energy (kWh → J).

    Offline (no network), no emissions.csv (save_to_file off, output_dir the run directory),
    no lock file (allow_multiple_runs). CodeCarbon swallows its own errors: a run in which it
    measured nothing comes back with `gpu_energy_j` None and the reason.
    """
    if importlib.util.find_spec("codecarbon") is None:
        raise ModeUnavailable(Mode.CODECARBON, "codecarbon")
    from codecarbon import OfflineEmissionsTracker

    kwargs = _accepted(
        OfflineEmissionsTracker.__init__,
        {
            "country_iso_code": country_iso_code,
            "output_dir": os.fspath(out_dir),
            "save_to_file": False,
            "save_to_api": False,
            "log_level": "error",
            "measure_power_secs": measure_power_secs,
            "gpu_ids": list(gpu_ids) if gpu_ids is not None else None,
            "allow_multiple_runs": True,
            "tracking_mode": "machine",
        },
    )
    if kwargs.get("gpu_ids") is None:
        kwargs.pop("gpu_ids", None)
    result = CrossCheck("codecarbon")
    tracker = OfflineEmissionsTracker(**kwargs)
    tracker.start()
    try:
        yield result
    finally:
        tracker.stop()
        data = getattr(tracker, "final_emissions_data", None)
        kwh = getattr(data, "gpu_energy", None) if data is not None else None
        gpu_count = getattr(data, "gpu_count", None) if data is not None else None
        if kwh is None:
            result.reason = "codecarbon returned no GPU energy (see its log for why)"
        elif not gpu_count:
            # CodeCarbon reports 0 kWh for a GPU it did not find: not a measurement of zero.
            result.reason = "codecarbon found no GPU to measure (it reports 0 kWh then)"
        else:
            result.gpu_energy_j = float(kwh) * J_PER_KWH
            result.duration_s = getattr(data, "duration", None)
            result.raw = {
                k: getattr(data, k)
                for k in ("gpu_energy", "energy_consumed", "gpu_power", "duration", "gpu_count")
                if hasattr(data, k)
            }


@contextmanager
def zeus_window(gpu_indices: Sequence[int] | None = None) -> Iterator[CrossCheck]:
    """Zeus's `ZeusMonitor` window around the block: its GPU energy in J.

    begin_window/end_window synchronize the device (Zeus's own choice); no log file, no CPU
    (RAPL) reads.
    """
    if importlib.util.find_spec("zeus") is None:
        raise ModeUnavailable(Mode.ZEUS, "zeus")
    from zeus.monitor import ZeusMonitor

    kwargs = _accepted(
        ZeusMonitor.__init__,
        {"gpu_indices": list(gpu_indices) if gpu_indices is not None else None, "cpu_indices": []},
    )
    monitor = ZeusMonitor(**kwargs)
    result = CrossCheck("zeus")
    key = "jouleprof-e2e"
    monitor.begin_window(key)
    try:
        yield result
    finally:
        m = monitor.end_window(key)
        per = {f"gpu{i}": float(e) for i, e in (getattr(m, "gpu_energy", None) or {}).items()}
        result.per_gpu_j = per
        result.duration_s = float(m.time)
        if per:
            result.gpu_energy_j = sum(per.values())
        else:
            result.reason = "zeus measured no GPU"


@contextmanager
def crosscheck(
    mode: Mode | str, out_dir: str | os.PathLike[str], gpu_indices: Sequence[int] | None = None
) -> Iterator[CrossCheck]:
    """The cross-check context of a ``codecarbon`` or ``zeus`` mode."""
    m = require(mode)
    if m is Mode.CODECARBON:
        cm = codecarbon_tracker(out_dir, gpu_indices)
    elif m is Mode.ZEUS:
        cm = zeus_window(gpu_indices)
    else:
        raise ValueError(f"mode {m.value!r} is not a cross-check (codecarbon or zeus)")
    with cm as result:
        yield result
