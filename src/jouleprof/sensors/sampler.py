"""Background reads of every sensor at a fixed interval, written out as they happen.

Every interval the sampler polls each sensor; what a poll reads is the sensor's business (the
NVML sensor reads the instant power every poll and its slow fields — 1 s average power,
utilization, memory, clock, temperature — every `slow_period_s`, 0.5 s by default in
`jouleprof measure`). A slow energy counter (NVML's costs ~5 ms of CPU per read on an H200) is
read at most about once per refresh period, at dithered times; end-to-end measurement reads it
about once a second.
Every sample is stamped on one monotonic clock at the middle of its read.

Samples go to a sink in batches (a CSV file in a run directory), so memory stays bounded for runs
of days; `stats` reports what sampling cost.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from jouleprof.clock import Clock, MonotonicClock
from jouleprof.errors import SensorError
from jouleprof.sensors.base import Sensor
from jouleprof.types import Reading, Sample

log = logging.getLogger(__name__)

_STOP_CHECK_S = 0.1  # the sampler thread sees stop() within this long

_Raw = tuple[float, str, "Reading | tuple[str, float]"]
"""A queued read: (t_s, device, a full Reading or a fast (column, value) pair)."""


class SampleSink(Protocol):
    def write(self, samples: Sequence[Sample]) -> None: ...

    def flush(self) -> None: ...


class ListSink:
    """Keeps samples in memory: for tests and short API measurements."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def write(self, samples: Sequence[Sample]) -> None:
        self.samples.extend(samples)

    def flush(self) -> None:
        pass


@dataclass(frozen=True)
class SamplerConfig:
    """How often to read."""

    interval_s: float = 0.02
    """Mean period of the cheap reads."""
    dither: float = 0.25
    """Each wait is interval_s × U(1 - dither, 1 + dither), so that reads never lock onto the
    sensor's refresh grid and the refresh instants can be located to a fraction of the interval."""
    counter_interval_s: float | None = None
    """Mean time between reads of a slow counter (dithered like the cheap reads); None: the
    sensor's refresh period, i.e. about one read per refresh (what phase attribution needs).
    On an H200 each read costs ~5 ms of CPU, so end-to-end measurement reads it ~1/s."""
    counter_dense_s: float = 0.0
    """For this long after start, a slow counter is read about once per refresh whatever
    counter_interval_s says: short runs then get a placeable counter, long ones pay for it
    once (see `densify` for the end of a run)."""
    counter_burst_every_s: float | None = None
    """Where counter_interval_s is long: every this many seconds, read the counter every
    refresh for `counter_burst_s`, so its refresh grid stays located through a long run."""
    counter_burst_s: float = 1.0
    dense_interval_s: float = 0.05
    """Poll period, at most, while the counter is read every refresh (a run's first seconds,
    its bursts, `densify`): a sampler polling every 0.5 s (the e2e mode) otherwise read the
    counter only every 0.5 s there, and its segment edges fell up to that far from a read
    (±7–13 % on 10 s e2e energies on the H200, benchmarks/results/options_vith_b8)."""
    flush_every_s: float = 1.0
    """How often buffered samples are handed to the sink (and so survive a crash)."""

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {self.interval_s}")
        if not 0 <= self.dither < 1:
            raise ValueError(f"dither must be in [0, 1), got {self.dither}")
        if self.counter_interval_s is not None and self.counter_interval_s < 0:
            raise ValueError(f"counter_interval_s must be ≥ 0, got {self.counter_interval_s}")
        if self.counter_dense_s < 0:
            raise ValueError(f"counter_dense_s must be ≥ 0, got {self.counter_dense_s}")
        if self.counter_burst_every_s is not None and not (
            self.counter_burst_every_s > self.counter_burst_s > 0
        ):
            raise ValueError("need counter_burst_every_s > counter_burst_s > 0")
        if not self.flush_every_s > 0:
            raise ValueError(f"flush_every_s must be > 0, got {self.flush_every_s}")
        if not self.dense_interval_s > 0:
            raise ValueError(f"dense_interval_s must be > 0, got {self.dense_interval_s}")


@dataclass
class SamplerStats:
    """What sampling cost, reported in run.json."""

    n_polls: int = 0
    n_reads: int = 0
    n_counter_reads: int = 0
    n_read_errors: int = 0
    n_late_polls: int = 0
    """Polls that started more than one interval late (the thread was starved)."""
    wall_s: float = 0.0
    thread_cpu_s: float = 0.0
    read_time_s: float = 0.0
    """Host time spent inside sensor reads, counter reads included."""
    counter_read_time_s: float = 0.0
    max_counter_read_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def cpu_fraction_of_core(self) -> float | None:
        return self.thread_cpu_s / self.wall_s if self.wall_s > 0 else None

    @property
    def mean_counter_read_s(self) -> float | None:
        return self.counter_read_time_s / self.n_counter_reads if self.n_counter_reads else None

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["errors"] = self.errors[:20]
        d["cpu_fraction_of_core"] = self.cpu_fraction_of_core
        d["mean_counter_read_s"] = self.mean_counter_read_s
        return d


@dataclass
class _DeviceState:
    sensor: Sensor
    device: str
    counter_gap_s: float
    """Mean time between counter reads (0 for a cheap counter: read on every poll)."""
    refresh_s: float
    """The sensor's refresh period: the counter gap while sampling densely."""
    slow_counter: bool
    read_fast: Callable[[str], tuple[str, float] | None] | None = None
    """The sensor's `read_fast`, where it has one (see `Sampler._poll`)."""
    next_counter_t_s: float = float("-inf")
    last_counter_t_s: float = float("-inf")


class Sampler:
    """Reads `sensors` every `config.interval_s` on a background thread (or on demand).

    Use as a context manager, or call `start()`/`stop()`. Tests drive `poll_once()` directly
    with a `ManualClock` to sample in virtual time.
    """

    def __init__(
        self,
        sensors: Sequence[Sensor],
        sink: SampleSink | None = None,
        config: SamplerConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or SamplerConfig()
        self.clock = clock or MonotonicClock()
        self.sink = sink if sink is not None else ListSink()
        self.stats = SamplerStats()
        self._devices = [
            _DeviceState(
                s,
                d,
                self._counter_gap_s(s),
                s.nominal_refresh_s or 0.1,
                s.counter_read_is_slow,
                getattr(s, "read_fast", None),
            )
            for s in sensors
            for d in s.devices
        ]
        self._dense_until_s = float("-inf")  # set by mark_start() and densify()
        self._wake = False  # densify() cuts the thread's current wait short
        self._started_s = 0.0
        self._buffer: list[_Raw] = []  # reads not yet handed to the sink
        self._rng = random.Random(0x6A71)
        self._last_flush_s = float("-inf")
        self._thread: threading.Thread | None = None
        self._stopping = False  # read by the thread after every wake: a plain bool is cheapest
        self._lock = threading.Lock()  # poll_once from the thread vs. the final poll in stop()

    def _counter_gap_s(self, sensor: Sensor) -> float:
        if not sensor.counter_read_is_slow:
            return 0.0
        if self.config.counter_interval_s is not None:
            return self.config.counter_interval_s
        return sensor.nominal_refresh_s or 0.1

    @property
    def devices(self) -> list[str]:
        return [d.device for d in self._devices]

    def _wants_counter(self, st: _DeviceState, now_s: float, force: bool) -> bool:
        if force or not st.slow_counter or now_s >= st.next_counter_t_s:
            return True
        # Entering a dense stretch (a burst) must not wait for a read scheduled sparsely.
        if now_s >= self._dense_until_s and self.config.counter_burst_every_s is None:
            return False  # most polls: no dense stretch to enter (checked without a call)
        lo = 1.0 - self.config.dither
        return self._dense(now_s) and now_s - st.last_counter_t_s >= lo * st.refresh_s

    def poll_once(self, force_counter: bool = False) -> list[Sample]:
        """Read every device once; returns the samples (also queued for the sink)."""
        return [_to_sample(e) for e in self._poll(force_counter)]

    def _poll(self, force_counter: bool = False) -> list[_Raw]:
        """Read every device once and queue the raw reads; returns them.

        This runs 50 times a second, cold, just after the thread wakes, where every Python
        object costs tens of µs (benchmarks/results/sampler_cost): a poll that needs only a
        sensor's one fast signal takes it through `read_fast` as a (column, value) pair, and
        reads become Samples at the flush, once a second and hot.
        """
        now_s = self.clock.now_s
        with self._lock:
            out: list[_Raw] = []
            t_after = 0.0
            for st in self._devices:
                t_before = now_s()
                counter = self._wants_counter(st, t_before, force_counter)
                try:
                    value = None if counter or st.read_fast is None else st.read_fast(st.device)
                    if value is None:
                        value = st.sensor.read(st.device, counter)
                except SensorError as e:
                    self.stats.n_read_errors += 1
                    if len(self.stats.errors) < 100:
                        self.stats.errors.append(f"{st.device}: {e}")
                    log.warning("sensor read failed on %s: %s", st.device, e)
                    continue
                t_after = now_s()
                dt = t_after - t_before
                self.stats.n_reads += 1
                self.stats.read_time_s += dt
                if counter and value.energy_j is not None:
                    # Dithered gaps: reads land at every phase of the counter's refresh grid,
                    # so which gaps saw it move locates that grid (sensors/refresh.py).
                    d = self.config.dither
                    gap = st.refresh_s if self._dense(t_before) else st.counter_gap_s
                    gap = min(gap, st.counter_gap_s)
                    st.next_counter_t_s = t_before + gap * self._rng.uniform(1 - d, 1 + d)
                    st.last_counter_t_s = t_before
                    if st.slow_counter:
                        self.stats.n_counter_reads += 1
                        self.stats.counter_read_time_s += dt
                        self.stats.max_counter_read_s = max(self.stats.max_counter_read_s, dt)
                out.append((0.5 * (t_before + t_after), st.device, value))
            self.stats.n_polls += 1
            self._buffer.extend(out)
            t = t_after or now_s()
            if t - self._last_flush_s >= self.config.flush_every_s:
                self._flush_locked(t)
            return out

    def _flush_locked(self, now_s: float) -> None:
        if self._buffer:
            self.sink.write([_to_sample(e) for e in self._buffer])
            self._buffer = []
        self.sink.flush()
        self._last_flush_s = now_s

    def flush(self) -> None:
        with self._lock:
            self._flush_locked(self.clock.now_s())

    # -- background thread -------------------------------------------------------------------

    def _dense(self, now_s: float) -> bool:
        if now_s < self._dense_until_s:
            return True
        every = self.config.counter_burst_every_s
        return every is not None and (now_s - self._started_s) % every < self.config.counter_burst_s

    def densify(self, seconds: float, read_now: bool = False) -> None:
        """Read slow counters about once per refresh for the next `seconds` (a run's end).

        `read_now`: also read every sensor, counters included, here and now (on the caller's
        thread: an NVML counter read takes ~4 ms), so that an edge about to be stamped has a
        counter reading just before it.
        """
        if read_now:
            self.poll_once(force_counter=True)
        now_s = self.clock.now_s()
        self._dense_until_s = now_s + seconds
        for st in self._devices:
            if st.slow_counter:
                st.next_counter_t_s = min(st.next_counter_t_s, now_s)
        self._wake = True  # a thread sleeping toward a sparse poll polls now, then densely

    def mark_start(self) -> None:
        """Take now as the run's start (its dense counter stretch and bursts count from here).

        `start()` does this; call it directly when driving `poll_once` in virtual time.
        """
        self._started_s = self.clock.now_s()
        self._dense_until_s = self._started_s + self.config.counter_dense_s

    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("Sampler.start() called twice")
        self.mark_start()
        self._stopping = False
        self.poll_once(force_counter=True)  # the run's first edge: every counter read
        self._thread = threading.Thread(target=self._loop, name="jouleprof-sampler", daemon=True)
        self._wall0 = time.perf_counter()
        self._thread.start()
        return self

    def _loop(self) -> None:
        cpu0 = time.thread_time()
        interval, dither = self.config.interval_s, self.config.dither
        dense_interval = self.config.dense_interval_s
        rng = random.Random(0x6A70)
        now_s, sleep, random01 = self.clock.now_s, time.sleep, rng.random
        lo, span = 1.0 - dither, 2.0 * dither
        t = now_s()
        next_s = t + (dense_interval if interval > dense_interval and self._dense(t) else interval)
        try:
            while not self._stopping:
                # time.sleep, in slices of ≤ 0.1 s so that stop() is seen soon: waking from
                # it costs the thread about two thirds of what Event.wait(timeout) does, and
                # the wake-ups are most of the sampler's CPU (benchmarks/results/sampler_cost).
                wait = next_s - t
                while wait > 0:
                    sleep(wait if wait < _STOP_CHECK_S else _STOP_CHECK_S)
                    wait -= _STOP_CHECK_S
                    if self._stopping:
                        return
                    if self._wake:
                        self._wake = False
                        next_s = now_s()
                        break
                self._poll()
                t = now_s()
                step = interval
                if interval > dense_interval and self._dense(t):
                    step = dense_interval
                next_s += step * (lo + span * random01())  # random.uniform's arithmetic, inline
                if t > next_s + step:  # starved: skip, don't burst to catch up
                    self.stats.n_late_polls += 1
                    next_s = t + step
        except Exception as e:  # never let a sampler failure kill the measured workload
            log.exception("sampler thread stopped")
            self.stats.errors.append(f"sampler thread stopped: {e!r}")
        finally:
            self.stats.thread_cpu_s += time.thread_time() - cpu0

    def stop(self) -> None:
        """Stop the thread, take a last reading of every counter, and flush to the sink."""
        if self._thread is not None:
            self._stopping = True
            self._thread.join()
            self.stats.wall_s += time.perf_counter() - self._wall0
            self._thread = None
        self.poll_once(force_counter=True)  # the run's last edge
        self.flush()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _to_sample(raw: _Raw) -> Sample:
    """A queued read as a Sample."""
    t_s, device, value = raw
    if isinstance(value, Reading):
        return Sample.of(t_s, device, value)
    column, v = value
    return Sample(t_s, device, **{column: v})
