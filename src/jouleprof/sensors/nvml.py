"""NVIDIA GPUs through NVML (package nvidia-ml-py, imported as `pynvml` only when a sensor opens).

Devices are named "gpu{i}" with i the index the user sees under CUDA_VISIBLE_DEVICES (integers,
GPU or MIG UUIDs), mapped to the physical NVML handle by `visible.py`.

Signals (shared/FACTS.md: on an H200 all power signals refresh about every 100 ms):
- power_w: nvmlDeviceGetPowerUsage, a 1 s running average on Ampere (except A100) and newer.
- power_instant_w: field NVML_FI_DEV_POWER_INSTANT (186).
- energy_j: nvmlDeviceGetTotalEnergyConsumption, read only when asked (it blocks ~3 ms).
- util_pct, mem_used_bytes, sm_clock_mhz, temp_c.
Only the instant power is read at every poll; the others ("slow fields") once per
`slow_period_s` (see `slow_fields_due`).
Every NVML error is mapped to a `SensorError` here, with what failed and how to fix it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jouleprof.errors import SensorError, SensorUnavailable
from jouleprof.sensors.base import SignalInfo
from jouleprof.sensors.visible import (  # noqa: F401  (parsers re-exported)
    VisibleGpu,
    parse_visible_devices,
    redact_visible_devices,
    resolve_gpus,
)
from jouleprof.types import Reading
from jouleprof.units import MJ_PER_J, MW_PER_W

log = logging.getLogger(__name__)

POWER_INSTANT_FIELD = 186  # NVML_FI_DEV_POWER_INSTANT (nvml.h)
NOMINAL_REFRESH_S = 0.1  # documented update period of NVML power and energy on recent GPUs
# Read at every poll: the instant power, whose ~100 ms refresh edges the sampler must catch.
# The "slow fields" (the 1 s running average power_w, utilization, memory used, SM clock,
# temperature: 5 NVML calls) are read once per `slow_period_s` of the sensor, and with every
# energy-counter read once they are a refresh old. Inside the sampler on the H200's host, where
# each poll runs cold just after its thread wakes, a set of the 5 reads took ~0.6 ms against
# ~0.06 ms for the instant power (benchmarks/results/sampler_cost): at 10 Hz ~0.6 % of a core.
# (Hot, in a tight loop, they cost 10 µs and 2.7 µs: benchmarks/results/nvml_read_cost.)
# They change slowly (a 1 s average; the caching
# allocator's memory grows and stays, so peaks persist), so `jouleprof measure` reads them
# every 0.5 s (MeasureConfig.slow_fields_period_s); phase attribution (fine mode) keeps 0.1 s,
# the period below, which stays the sensor's own default.
FAST_SIGNALS = frozenset({"power_instant_w"})
SLOW_FIELDS_PERIOD_S = 0.1  # NvmlSensor's default slow_period_s


def slow_fields_due(
    now_s: float, due_s: float, last_s: float, period_s: float, counter: bool = False
) -> tuple[bool, float]:
    """Whether a poll at `now_s` reads the slow fields, and when they next fall due.

    They fall due once in every `period_s`-long slot of a fixed grid started at the first read:
    the first poll in each slot reads them. (Timed from the last read instead, polls dithered
    about a period equal to `period_s` would read them only at every other poll or so.) A grid
    left more than a slot behind (a starved sampler) keeps its phase and skips the missed slots.
    A poll that reads the energy counter (which costs ~5 ms) also reads them, without using up a
    slot, once they are `NOMINAL_REFRESH_S` old: a run's edges, where the counter is read every
    refresh, then have them at the refresh rate, whatever the period.

    Args:
        now_s: the poll's time.
        due_s: when they fall due (-inf before the first read).
        last_s: when they were last read (-inf before the first read).
        period_s: the slot length (> 0).
        counter: the poll also reads the energy counter.

    Returns:
        (read them now, when they fall due after this poll).
    """
    if now_s >= due_s:
        if math.isinf(due_s):
            return True, now_s + period_s
        return True, due_s + period_s * (math.floor((now_s - due_s) / period_s) + 1)
    return counter and now_s - last_s >= NOMINAL_REFRESH_S, due_s


def check_slow_period(period_s: float) -> float:
    """`period_s` as a float, or ValueError saying what is allowed."""
    if not (isinstance(period_s, int | float) and math.isfinite(period_s) and period_s > 0):
        raise ValueError(
            f"the slow-field period must be a finite number of seconds > 0 (got {period_s!r}); "
            f"try 0.5 (0.1 for phase attribution)"
        )
    return float(period_s)


# nvmlValueType_t (nvml.h) -> member of the nvmlValue_t union that holds the value.
_UNION_MEMBER = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}

# NVML return codes meaning "this signal does not exist here" rather than "something broke".
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND, _INVALID_ARGUMENT = 3, 4, 13, 2
_UNSUPPORTED_CODES = frozenset({_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND})
_SIGNAL_NOTES = {
    "power_w": "nvmlDeviceGetPowerUsage: a 1 s running average on Ampere (except A100) and newer",
    "power_instant_w": "NVML field POWER_INSTANT (186): a short-window power reading",
    "energy_j": "nvmlDeviceGetTotalEnergyConsumption: cumulative since driver load; read ~3 ms",
}


def import_pynvml() -> Any:
    """Import pynvml, or raise SensorUnavailable saying how to install it."""
    try:
        import pynvml
    except ImportError as err:
        raise SensorUnavailable(
            "pynvml is not installed — `pip install nvidia-ml-py` to measure NVIDIA GPUs"
        ) from err
    return pynvml


def map_nvml_error(err: Exception, what: str) -> SensorError:
    """Turn a pynvml.NVMLError into a SensorError that says what failed and how to fix it."""
    code = getattr(err, "value", None)
    fixes = {
        12: "NVIDIA driver not loaded: libnvidia-ml.so not found — install the NVIDIA driver "
        "or run on a machine with an NVIDIA GPU",
        9: "NVIDIA driver not loaded — load the kernel module (`nvidia-smi` should work) "
        "or run on a machine with an NVIDIA GPU",
        18: "the NVIDIA driver and libnvidia-ml.so differ in version (a driver update "
        "without reboot?) — reboot or reload the nvidia kernel module",
        _NO_PERMISSION: "permission denied by NVML — run as a user allowed to use /dev/nvidia*",
        _NOT_SUPPORTED: "not supported by this GPU or driver",
        _FUNCTION_NOT_FOUND: "the NVIDIA driver is too old for this query — update the driver",
        15: "the GPU has fallen off the bus — check `nvidia-smi` and `dmesg`; reset the GPU or "
        "reboot",
        1: "NVML is not initialised (the sensor was closed?) — open a new sensor",
    }
    unavailable = code in (12, 9, 18, _NO_PERMISSION, _NOT_SUPPORTED, _FUNCTION_NOT_FOUND)
    fix = fixes.get(code, f"NVML error {code} ({err}) — check that `nvidia-smi` works")
    cls = SensorUnavailable if unavailable else SensorError
    return cls(f"{what} failed: {fix}")


def union_value(union: Any, value_type: int) -> float | None:
    """The number in an nvmlValue_t union of nvmlValueType_t `value_type` (None: a type this
    version does not know). Field values and buffered samples both carry one."""
    member = _UNION_MEMBER.get(int(value_type))
    return None if member is None else float(getattr(union, member))


def decode_field_value(value: Any) -> float | None:
    """The number in an nvmlFieldValue_t, or None when NVML returned an error for that field."""
    if value.nvmlReturn != 0:
        return None
    return union_value(value.value, value.valueType)


def instant_field_reader(nv: Any, handle: Any) -> Callable[[], float | None]:
    """A reader of one GPU's POWER_INSTANT field, in milliwatts (None: NVML said no).

    It is read every poll (50 times a second at 20 ms), so it calls NVML's function with one
    array made once, where pynvml's nvmlDeviceGetFieldValues builds a ctypes array and looks
    the function up on every call. Not thread-safe (one array): one sampler thread reads it.
    Falls back to pynvml's call where its private helpers are missing.
    """
    import ctypes

    fields = [POWER_INSTANT_FIELD]
    try:
        arr = (nv.c_nvmlFieldValue_t * 1)()
        fn = nv._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
        check = nv._nvmlCheckReturn
    except AttributeError:
        return lambda: decode_field_value(nv.nvmlDeviceGetFieldValues(handle, fields)[0])
    arr[0].fieldId = POWER_INSTANT_FIELD
    count, ref = ctypes.c_int32(1), ctypes.byref(arr)
    first = arr[0]

    def read() -> float | None:
        check(fn(handle, count, ref))
        return decode_field_value(first)

    return read


@dataclass
class _Gpu(VisibleGpu):
    """A measured GPU: what it is, and the readers found to work on it when the sensor opened."""

    readers: list[tuple[str, Callable[[Any], Any]]] = field(default_factory=list)
    counter: Callable[[Any], float] | None = None
    infos: list[SignalInfo] = field(default_factory=list)
    slow_due_at: float = float("-inf")
    slow_read_at: float = float("-inf")
    fast: frozenset[str] = FAST_SIGNALS
    """Signals read at every poll: the instant power, or the average where there is none."""
    fast_readers: list[tuple[str, Callable[[Any], Any]]] = field(default_factory=list)
    """The readers of the signals in `fast`."""


class NvmlSensor:
    """NVIDIA GPUs read through NVML. One nvmlInit per instance, undone by `close()`.

    Args:
        gpus: user-visible GPU indices (as under CUDA_VISIBLE_DEVICES); None for every visible GPU.
        environ: where CUDA_VISIBLE_DEVICES is read from (default: os.environ).
        slow_period_s: seconds between reads of the slow fields (average power, utilization,
            memory, clock, temperature; `slow_fields_due` says exactly when). Default
            SLOW_FIELDS_PERIOD_S (0.1 s); `jouleprof measure` uses 0.5 s.

    Raises:
        ValueError: slow_period_s is not > 0.
        SensorUnavailable: no driver, no pynvml, or no GPU visible.
        SensorError: a requested GPU index does not exist, or NVML failed.
    """

    kind = "nvml"
    counter_read_is_slow = True
    nominal_refresh_s = NOMINAL_REFRESH_S

    def __init__(
        self,
        gpus: Sequence[int] | None = None,
        environ: Mapping[str, str] | None = None,
        slow_period_s: float = SLOW_FIELDS_PERIOD_S,
    ):
        self.slow_period_s = check_slow_period(slow_period_s)
        nv = import_pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as err:
            raise map_nvml_error(err, "opening NVML") from err
        self._nv = nv
        self._closed = False
        try:
            found = [
                _Gpu(g.name, g.handle, g.physical_index, g.note)
                for g in resolve_gpus(nv, gpus, environ)
            ]
            if not found:
                raise SensorUnavailable(
                    "no NVIDIA GPU is visible (CUDA_VISIBLE_DEVICES is empty or names none) — "
                    "unset it or list the GPUs to measure"
                )
            for gpu in found:
                self._probe(gpu)
        except BaseException:
            self.close()
            raise
        self._gpus = {g.name: g for g in found}
        self._devices = tuple(self._gpus)

    @property
    def devices(self) -> tuple[str, ...]:
        return self._devices

    def signals(self) -> list[SignalInfo]:
        return [info for g in self._gpus.values() for info in g.infos]

    def handle(self, device: str) -> Any:
        """The NVML handle of `device`, for other NVML queries while the sensor is open."""
        return self._gpu(device).handle

    @property
    def nv(self) -> Any:
        """The pynvml module this sensor initialised (valid until `close`)."""
        return self._nv

    def _gpu(self, device: str) -> _Gpu:
        if self._closed:
            raise SensorError(f"reading {device}: the NVML sensor is closed — open a new one")
        try:
            return self._gpus[device]
        except KeyError:
            raise SensorError(
                f"unknown device {device!r}: this sensor has {self._devices}"
            ) from None

    def _probe(self, gpu: _Gpu) -> None:
        nv = self._nv
        read_instant_mw = instant_field_reader(nv, gpu.handle)

        def instant(h: Any) -> float | None:
            v = read_instant_mw()  # this GPU's handle, bound in the reader
            return None if v is None else v / MW_PER_W

        readers: list[tuple[str, Callable[[Any], Any]]] = [
            ("power_w", lambda h: nv.nvmlDeviceGetPowerUsage(h) / MW_PER_W),
            ("power_instant_w", instant),
            ("util_pct", lambda h: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            ("mem_used_bytes", lambda h: int(nv.nvmlDeviceGetMemoryInfo(h).used)),
            ("sm_clock_mhz", lambda h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ("temp_c", lambda h: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            ("energy_j", lambda h: nv.nvmlDeviceGetTotalEnergyConsumption(h) / MJ_PER_J),
        ]
        for signal, fn in readers:
            reason = self._probe_one(gpu, signal, fn)
            if reason is None:
                note = _SIGNAL_NOTES.get(signal)
                if gpu.note and signal in ("power_w", "power_instant_w", "energy_j", "util_pct"):
                    note = f"{note}; {gpu.note}" if note else gpu.note
                gpu.infos.append(SignalInfo(gpu.name, signal, True, note))
                if signal == "energy_j":
                    gpu.counter = fn
                else:
                    gpu.readers.append((signal, fn))
            else:
                log.info("%s %s unavailable: %s", gpu.name, signal, reason)
                gpu.infos.append(SignalInfo(gpu.name, signal, False, reason))
        if not any(signal in FAST_SIGNALS for signal, _ in gpu.readers):
            gpu.fast = frozenset({"power_w"})
        gpu.fast_readers = [(sig, fn) for sig, fn in gpu.readers if sig in gpu.fast]

    def _probe_one(self, gpu: _Gpu, signal: str, fn: Callable[[Any], Any]) -> str | None:
        nv = self._nv
        try:
            if signal == "power_instant_w":
                fv = nv.nvmlDeviceGetFieldValues(gpu.handle, [POWER_INSTANT_FIELD])[0]
                if fv.nvmlReturn != 0:
                    return f"NVML field POWER_INSTANT returned error {fv.nvmlReturn} on this GPU"
                if fv.valueType not in _UNION_MEMBER:
                    return f"NVML field POWER_INSTANT has unknown value type {fv.valueType}"
            else:
                fn(gpu.handle)
        except nv.NVMLError as err:
            if err.value in _UNSUPPORTED_CODES or err.value == _INVALID_ARGUMENT:
                return str(map_nvml_error(err, f"reading {signal} of {gpu.name}"))
            raise map_nvml_error(err, f"reading {signal} of {gpu.name}") from err
        return None

    def read_fast(self, device: str) -> tuple[str, float] | None:
        """The one fast signal of `device` as (column, value), when a poll needs nothing else.

        Most polls (49 of 50 a second at 20 ms) read the instant power alone; this path skips
        building a Reading because it runs cold, just after the sampler wakes, where each
        Python object costs tens of µs (benchmarks/results/sampler_cost). None: the slow
        fields are due (or there is more than one fast signal), so call `read`.
        """
        gpu = self._gpu(device)
        if time.perf_counter() >= gpu.slow_due_at or len(gpu.fast_readers) != 1:
            return None
        signal, fn = gpu.fast_readers[0]
        try:
            return signal, fn(gpu.handle)
        except self._nv.NVMLError as err:
            raise map_nvml_error(err, f"reading {signal} of {device}") from err

    def read(self, device: str, counter: bool) -> Reading:
        """Read the cheap signals of `device`, and the energy counter too when `counter` is True.

        The instant power is read every time, the slow fields when `slow_fields_due` says so.
        Signals found unavailable when the sensor opened are None, never 0.
        """
        gpu = self._gpu(device)
        h = gpu.handle
        now = time.perf_counter()
        values: dict[str, Any] = {}
        signal = ""
        # Average power, utilization, memory, clock and temperature change slowly: they are
        # read about once per slow_period_s (None in between: "not read").
        slow_due, gpu.slow_due_at = slow_fields_due(
            now, gpu.slow_due_at, gpu.slow_read_at, self.slow_period_s, counter
        )
        if slow_due:
            gpu.slow_read_at = now
        try:
            for signal, fn in gpu.readers:
                if slow_due or signal in gpu.fast:
                    values[signal] = fn(h)
            if counter and gpu.counter is not None:
                signal = "energy_j"
                values[signal] = gpu.counter(h)
        except self._nv.NVMLError as err:
            raise map_nvml_error(err, f"reading {signal} of {device}") from err
        return Reading(**values)

    def close(self) -> None:
        """Shut NVML down for this instance; later reads raise SensorError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError as err:
            log.warning("nvmlShutdown failed: %s", err)

    def __enter__(self) -> NvmlSensor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gpu_processes(
    sensor_or_indices: NvmlSensor | Sequence[int] | None,
    environ: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The compute processes on the measured GPUs: another process there means a disturbed run.

    Args:
        sensor_or_indices: an open NvmlSensor, or user-visible GPU indices (None: all visible).
        environ: where CUDA_VISIBLE_DEVICES is read from when indices are given.

    Returns:
        One dict per process and GPU: device, pid, used_memory_bytes (None where NVML does not
        say), own (the pid is this process's; in a container with its own PID namespace NVML
        reports host pids, so even our own process may show as not own).

    Raises:
        SensorError: NVML could not be opened or could not list processes.
    """
    if isinstance(sensor_or_indices, NvmlSensor):
        sensor = sensor_or_indices
        return _processes(sensor._nv, [sensor._gpu(d) for d in sensor.devices])
    nv = import_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        raise map_nvml_error(err, "opening NVML to list GPU processes") from err
    try:
        return _processes(nv, resolve_gpus(nv, sensor_or_indices, environ))
    finally:
        nv.nvmlShutdown()


def _processes(nv: Any, gpus: Sequence[VisibleGpu]) -> list[dict[str, Any]]:
    own = os.getpid()
    out = []
    for gpu in gpus:
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
        except nv.NVMLError as err:
            raise map_nvml_error(err, f"listing the processes on {gpu.name}") from err
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(
                {
                    "device": gpu.name,
                    "pid": int(p.pid),
                    "used_memory_bytes": None if used is None else int(used),
                    "own": int(p.pid) == own,
                }
            )
    return out
