"""The records that flow between jouleprof's parts. Frozen dataclasses; SI units in every name."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1

# samples.csv columns, in order (shared/DESIGN.md: columns may be added, never renamed).
SAMPLE_COLUMNS: tuple[str, ...] = (
    "t_s",
    "device",
    "power_w",
    "power_instant_w",
    "energy_j",
    "util_pct",
    "mem_used_bytes",
    "sm_clock_mhz",
    "temp_c",
)
# spans.csv columns. t0_s/t1_s are on the samples' clock; for GPU phases they are the device's
# own timeline (CUDA events) mapped onto that clock. host_t0_s/host_t1_s are when the host
# entered/left the phase.
SPAN_COLUMNS: tuple[str, ...] = ("step", "phase", "t0_s", "t1_s", "host_t0_s", "host_t1_s")
PHASE_COLUMNS: tuple[str, ...] = (
    "phase",
    "time_s",
    "energy_j",
    "energy_lo_j",
    "energy_hi_j",
    "method",
)


@dataclass(frozen=True, slots=True)
class Reading:
    """What one read of a sensor returned for one device. None: not read this time (never zero)."""

    power_w: float | None = None
    """The sensor's default power figure (on NVIDIA Hopper a 1 s running average)."""
    power_instant_w: float | None = None
    """A short-window power figure (NVML field POWER_INSTANT)."""
    energy_j: float | None = None
    """The device's cumulative energy counter, in joules since an arbitrary origin."""
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    sm_clock_mhz: float | None = None
    temp_c: float | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One sensor read of one device, stamped on the run's monotonic clock (one samples.csv row)."""

    t_s: float
    device: str
    power_w: float | None = None
    power_instant_w: float | None = None
    energy_j: float | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    sm_clock_mhz: float | None = None
    temp_c: float | None = None

    @classmethod
    def of(cls, t_s: float, device: str, reading: Reading) -> Sample:
        return cls(
            t_s,
            device,
            reading.power_w,
            reading.power_instant_w,
            reading.energy_j,
            reading.util_pct,
            reading.mem_used_bytes,
            reading.sm_clock_mhz,
            reading.temp_c,
        )

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in SAMPLE_COLUMNS)


@dataclass(frozen=True, slots=True)
class Span:
    """One occurrence of a phase: [t0_s, t1_s] on the samples' clock (one spans.csv row).

    Nested phases are named as paths, parent first: "forward/target".
    """

    step: int
    phase: str
    t0_s: float
    t1_s: float
    host_t0_s: float | None = None
    host_t1_s: float | None = None

    def __post_init__(self) -> None:
        if not self.phase:
            raise ValueError("Span.phase must be a non-empty name")
        if not (math.isfinite(self.t0_s) and math.isfinite(self.t1_s)):
            raise ValueError(f"Span {self.phase!r} of step {self.step} has a non-finite time")
        if self.t1_s < self.t0_s:
            raise ValueError(
                f"Span {self.phase!r} of step {self.step} ends before it starts "
                f"({self.t0_s:.6f} s > {self.t1_s:.6f} s)"
            )

    @property
    def duration_s(self) -> float:
        return self.t1_s - self.t0_s

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in SPAN_COLUMNS)


class Source(StrEnum):
    """Where a figure came from."""

    MEASURED = "measured"
    ESTIMATED = "estimated"
    SIMULATED = "simulated"
    """From the package's simulated GPU (a machine without one): never a measurement."""
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Figure:
    """A number with its unit, its source and, when known, its uncertainty interval.

    An unavailable figure has value None and a reason: jouleprof never reports a silent zero.
    """

    value: float | None
    unit: str
    source: Source
    reason: str | None = None
    """Why the figure is unavailable, or how an estimate was made."""
    signal: str | None = None
    """Which sensor signal it came from (counter, power_instant, power_avg, timer, ...)."""
    lo: float | None = None
    hi: float | None = None

    def __post_init__(self) -> None:
        if self.source is Source.UNAVAILABLE:
            if self.value is not None:
                raise ValueError("an unavailable Figure must have value None")
            if not self.reason:
                raise ValueError("an unavailable Figure must say why (reason)")
        elif self.value is None:
            raise ValueError(f"a {self.source.value} Figure needs a value")

    @classmethod
    def measured(cls, value: float, unit: str, signal: str | None = None, **kw: Any) -> Figure:
        return cls(float(value), unit, Source.MEASURED, signal=signal, **kw)

    @classmethod
    def estimated(cls, value: float, unit: str, reason: str, **kw: Any) -> Figure:
        return cls(float(value), unit, Source.ESTIMATED, reason=reason, **kw)

    @classmethod
    def unavailable(cls, unit: str, reason: str) -> Figure:
        return cls(None, unit, Source.UNAVAILABLE, reason=reason)

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        d["source"] = self.source.value
        d["value"] = self.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Figure:
        return cls(
            value=d.get("value"),
            unit=d["unit"],
            source=Source(d["source"]),
            reason=d.get("reason"),
            signal=d.get("signal"),
            lo=d.get("lo"),
            hi=d.get("hi"),
        )

    def __str__(self) -> str:
        if self.value is None:
            return f"unavailable ({self.reason})"
        s = f"{self.value:.4g} {self.unit}"
        if self.lo is not None and self.hi is not None:
            s += f" [{self.lo:.4g}, {self.hi:.4g}]"
        return s


class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # interrupted (Ctrl-C) or crashed: data up to that point is kept
    FAILED = "failed"  # the measured command or workload failed


@dataclass
class RunRecord:
    """run.json: what was run, on what, and the summary figures, each with its source."""

    run_id: str
    kind: str
    """What produced the run: measure, train, study-cell, ..."""
    status: RunStatus = RunStatus.RUNNING
    config: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    git: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Figure] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Structured results a workload adds (per-device tables, overhead blocks, ...)."""
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "kind": self.kind,
            "status": self.status.value,
            "config": self.config,
            "hardware": self.hardware,
            "environment": self.environment,
            "git": self.git,
            "summary": {k: f.to_json() for k, f in self.summary.items()},
            "notes": self.notes,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunRecord:
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"run.json has schema_version {version!r}; this jouleprof reads {SCHEMA_VERSION}"
            )
        return cls(
            run_id=d["run_id"],
            kind=d["kind"],
            status=RunStatus(d["status"]),
            config=d.get("config", {}),
            hardware=d.get("hardware", {}),
            environment=d.get("environment", {}),
            git=d.get("git", {}),
            summary={k: Figure.from_json(v) for k, v in d.get("summary", {}).items()},
            notes=list(d.get("notes", [])),
            extra=d.get("extra", {}),
            schema_version=version,
        )
