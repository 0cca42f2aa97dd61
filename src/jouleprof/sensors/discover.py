"""Open every sensor this machine offers, and say what is missing and why.

GPUs asked for by index must exist: a missing driver or index is an error. GPUs not asked for
(`gpus=None`: every visible GPU) and RAPL are best effort: what cannot be opened becomes a reason
in `Discovery.unavailable`, so a run on a laptop still measures what it can and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jouleprof.errors import SensorUnavailable
from jouleprof.sensors.base import Sensor, SignalInfo
from jouleprof.sensors.rapl import DEFAULT_POWERCAP_ROOT, open_rapl

log = logging.getLogger(__name__)

ALL_SIGNALS = "*"
"""The `signal` of a SignalInfo that covers every signal of a device family ("gpu", "cpu")."""


@dataclass
class Discovery:
    """The sensors that opened, and every signal that is unavailable with its reason."""

    sensors: list[Sensor] = field(default_factory=list)
    unavailable: list[SignalInfo] = field(default_factory=list)
    """Unavailable signals of opened sensors, and whole sensors that could not be opened
    (device "gpu" or "cpu", signal "*")."""
    notes: list[str] = field(default_factory=list)
    """One line per sensor that could not be opened, for run.json and the terminal."""

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(d for s in self.sensors for d in s.devices)

    def close(self) -> None:
        """Close every sensor (errors are logged, so one failure does not leak the others)."""
        for sensor in self.sensors:
            try:
                sensor.close()
            except Exception as err:  # keep closing the rest
                log.warning("closing the %s sensor failed: %s", sensor.kind, err)

    def __enter__(self) -> Discovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_sensors(
    gpus: Sequence[int] | None = None,
    rapl: bool = True,
    rapl_root: Path | str = DEFAULT_POWERCAP_ROOT,
    *,
    environ: Mapping[str, str] | None = None,
    gpu_slow_period_s: float | None = None,
) -> Discovery:
    """Open the NVIDIA GPU sensor and the RAPL CPU sensor.

    Args:
        gpus: user-visible GPU indices (as under CUDA_VISIBLE_DEVICES) to measure; None for every
            visible GPU, [] for none.
        rapl: also measure CPU package and DRAM energy through Linux powercap, where readable.
        rapl_root: the powercap directory.
        environ: where CUDA_VISIBLE_DEVICES is read from (default: os.environ).
        gpu_slow_period_s: seconds between the GPU sensor's reads of its slow fields (average
            power, utilization, memory, clock, temperature); None: NvmlSensor's default
            (nvml.SLOW_FIELDS_PERIOD_S). Checked before anything is opened.

    Returns:
        The opened sensors and what is unavailable. Close it (or use `with`) when done.

    Raises:
        ValueError: gpu_slow_period_s is not > 0.
        SensorError: a requested GPU index does not exist, or GPUs were requested and NVML cannot
            be opened (no driver, no pynvml).
    """
    if gpu_slow_period_s is not None:
        from jouleprof.sensors.nvml import check_slow_period

        check_slow_period(gpu_slow_period_s)
    found = Discovery()
    try:
        _open_gpus(found, gpus, environ, gpu_slow_period_s)
        if rapl:
            sensor, missing = open_rapl(rapl_root)
            if sensor is not None:
                found.sensors.append(sensor)
            found.unavailable.extend(missing)
            for info in missing:
                found.notes.append(f"CPU energy ({info.device}) unavailable: {info.reason}")
    except BaseException:
        found.close()
        raise
    return found


def _open_gpus(
    found: Discovery,
    gpus: Sequence[int] | None,
    environ: Mapping[str, str] | None,
    slow_period_s: float | None,
) -> None:
    if gpus is not None and len(gpus) == 0:
        return
    from jouleprof.sensors.nvml import NvmlSensor

    try:
        if slow_period_s is None:
            sensor = NvmlSensor(gpus, environ)
        else:
            sensor = NvmlSensor(gpus, environ, slow_period_s=slow_period_s)
    except SensorUnavailable as err:
        if gpus is not None:
            raise SensorUnavailable(f"GPU(s) {list(gpus)} were requested, but {err}") from err
        log.info("no GPU sensor: %s", err)
        found.unavailable.append(SignalInfo("gpu", ALL_SIGNALS, False, str(err)))
        found.notes.append(f"GPU energy unavailable: {err}")
        return
    found.sensors.append(sensor)
    found.unavailable.extend(s for s in sensor.signals() if not s.available)
