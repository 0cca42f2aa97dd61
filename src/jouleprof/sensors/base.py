"""The one small interface every sensor implements, and what it says about itself.

A sensor covers one or more devices ("gpu0", "cpu-package-0", ...). The sampler calls
`read(device, counter=...)`: the cheap fields every time, the cumulative energy counter only
when asked, because on NVIDIA GPUs that read blocks for milliseconds (shared/FACTS.md).
Vendor errors are mapped to `SensorError` inside each sensor module, never outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from jouleprof.types import SAMPLE_COLUMNS, Reading

# Signals a sensor may offer, by name: the samples.csv columns after t_s and device.
SIGNALS: tuple[str, ...] = SAMPLE_COLUMNS[2:]


@dataclass(frozen=True)
class SignalInfo:
    """Whether one signal of one device can be read, and if not, why."""

    device: str
    signal: str
    available: bool
    reason: str | None = None
    """Why it is unavailable, or a note on what it means (e.g. "1 s running average")."""


@runtime_checkable
class Sensor(Protocol):
    """A source of readings for one or more devices."""

    @property
    def kind(self) -> str:
        """A short name: nvml, rapl, simulated, replay."""
        ...

    @property
    def devices(self) -> tuple[str, ...]:
        """Device names as written to samples.csv, e.g. ("gpu0", "gpu1")."""
        ...

    @property
    def counter_read_is_slow(self) -> bool:
        """True where reading the energy counter costs milliseconds (NVML), so it is rationed."""
        ...

    @property
    def nominal_refresh_s(self) -> float | None:
        """The documented or modelled update period of the signals, if known (detected ones win)."""
        ...

    def signals(self) -> list[SignalInfo]:
        """Every signal of every device, readable or not and why."""
        ...

    def read(self, device: str, counter: bool) -> Reading:
        """Read the cheap fields of `device`, and the energy counter too when `counter` is True."""
        ...

    def close(self) -> None: ...

    # Optional, found with getattr by the sampler (a Protocol member would make every sensor
    # define it):
    #   read_fast(device) -> tuple[str, float] | None
    # the sensor's one cheap signal as (samples.csv column, value) when a poll needs nothing
    # else, or None when `read` must run (slow fields due). A poll runs cold 50 times a second,
    # and skipping the Reading it would build cuts its CPU (NvmlSensor implements it).
