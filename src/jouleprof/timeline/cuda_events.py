"""CUDA-event timing for the phase recorder: the event pool, clock anchors, and resolution.

The recorder's ``cuda-events`` mode stamps every phase boundary with a CUDA event recorded on
the current stream; this module owns those events and turns them into times on the run's clock.

Mapping event times onto the run's clock (see `clockmap.py`): the timer takes *anchors*,
moments known on both clocks. At start and at close it synchronizes the device and records an
event on a private side stream, bracketed by host reads (the tightest of five): an anchor known to a
few µs. While running it adds a cheap anchor every `anchor_interval_s`: an event on the idle
side stream, waited for with `event.synchronize()`, which waits for that event alone, never for
the training stream, and costs the host some tens of µs. An anchor whose bracket is wider than
`max_anchor_width_s` (the GPU front end was slow to get to it) is dropped. Event times are
chained from anchor to anchor with `elapsed_time` (so float32 milliseconds never span more
than one anchor interval) and mapped by linear interpolation between anchors, which follows a
drift between the GPU's timer and the host clock; past the last anchor the map extrapolates the
least-squares line of the latest anchors. Spans written before the last anchor was taken used
that extrapolation; with anchors 5 s apart its error is far below the sensors' 100 ms refresh.

The recorder's records, read here:

* a closed phase: ``(path, host_ns0, event0, anchor_k0, host_ns1, event1, anchor_k1)``, where
  ``anchor_k`` is the index of the latest anchor when the boundary was stamped (its event's
  time is chained from that anchor);
* a pending step: ``(step, [closed phase, ...])``;
* an open phase: ``(path, name, host_ns, event, anchor_k)``.

torch is never imported here: the recorder passes in the module it resolved.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from jouleprof.timeline.clockmap import ClockAnchor, ClockMap
from jouleprof.types import Span

if TYPE_CHECKING:
    from jouleprof.timeline.recorder import RecorderConfig, RecorderStats

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns


class CudaEventTimer:
    """Stamps boundaries with CUDA events and resolves completed steps onto the run's clock.

    Args:
        torch: the torch module (or a stand-in with the same `cuda` API, in tests).
        device: the CUDA device the events are recorded for.
        config: the recorder's `RecorderConfig` (pool size, anchor interval and width,
            pending bound).
        stats: the recorder's `RecorderStats`, updated in place (anchors, forced waits,
            host lead).
        to_s: maps `perf_counter_ns` to seconds on the run's clock.

    Making one synchronizes the device once, makes the event pool and takes the first anchor.
    """

    def __init__(
        self,
        torch: Any,
        device: Any,
        config: RecorderConfig,
        stats: RecorderStats,
        to_s: Callable[[int], float],
    ) -> None:
        self._torch = torch
        self.device = device
        self.config = config
        self.stats = stats
        self._to_s = to_s
        self._pool: list[Any] = []
        self._anchors: list[ClockAnchor] = []
        self._anchor_events: dict[int, tuple[Any, float]] = {}
        self.anchor_k = 0  # index of the latest anchor: new event times are chained from it
        self._next_anchor_ns = 0
        self._cmap: ClockMap | None = None
        self._current_stream = torch.cuda.current_stream
        with torch.cuda.device(device):
            self._side = torch.cuda.Stream(device)
            self._pool = [self._new_event() for _ in range(config.events_prealloc)]
            for ev in self._pool:  # torch creates the CUDA event at its first record
                ev.record(self._side)
            self._side.synchronize()
        self.take_anchor(hard=True)

    # -- boundary stamps (the hot path) ------------------------------------------------------

    def mark(self) -> tuple[int, Any, int]:
        """Stamp a boundary: (host ns, event recorded on the current stream, anchor index)."""
        ev = self._pool.pop() if self._pool else self._new_event()
        ns = _perf_ns()  # before the record: the GPU cannot pass the event earlier
        ev.record(self._current_stream(self.device))
        return ns, ev, self.anchor_k

    def recycle(self, ev: Any) -> None:
        """Give an event no record refers to back to the pool."""
        self._pool.append(ev)

    def _new_event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    # -- resolution --------------------------------------------------------------------------

    @staticmethod
    def _ready(recs: list[tuple]) -> bool:
        # One driver call per step: the step's last boundary. Events of one stream complete
        # in order; an event of another stream still running makes elapsed_time raise, and
        # the step is then simply tried again later (see resolve).
        return recs[-1][5].query()

    def resolve(self, pending: deque[tuple[int, list[tuple]]], wait: bool = False) -> list[Span]:
        """Pop the pending steps whose events have completed, oldest first; their spans.

        Without `wait`, waits only for the oldest step while more than `max_pending_steps`
        are pending; with it, waits for every step.
        """
        out: list[Span] = []
        while pending:
            step, recs = pending[0]
            if not recs:
                pending.popleft()
                continue
            if not self._ready(recs):
                if not wait and len(pending) <= self.config.max_pending_steps:
                    break
                if not wait:
                    self.stats.n_forced_waits += 1
                for r in recs:
                    r[5].synchronize()
                    r[2].synchronize()
            try:
                spans = self._resolve_events(step, recs)
            except RuntimeError:  # an event on another stream is not done yet
                if not wait:
                    break
                for r in recs:
                    r[2].synchronize()
                spans = self._resolve_events(step, recs)
            pending.popleft()
            out.extend(spans)
            for r in recs:
                self._pool.append(r[2])
                self._pool.append(r[5])
        return out

    def _gpu_s(self, ev: Any, k: int) -> float:
        aev, ag = self._anchor_events[k]
        return ag + aev.elapsed_time(ev) / 1e3

    def _clock_map(self) -> ClockMap:
        try:
            cmap = ClockMap(self._anchors)
        except ValueError as e:  # never let a bad anchor stop the training loop
            log.warning("clock anchors are inconsistent (%s): using the first alone", e)
            cmap = ClockMap(self._anchors[:1])
        self._cmap = cmap
        return cmap

    def _resolve_events(self, step: int, recs: list[tuple]) -> list[Span]:
        cmap = self._cmap or self._clock_map()
        lead = self.stats.max_host_lead_s
        out: list[Span] = []
        for path, ns0, ev0, k0, ns1, ev1, k1 in recs:
            t0 = cmap(self._gpu_s(ev0, k0))
            t1 = max(cmap(self._gpu_s(ev1, k1)), t0)
            h0, h1 = self._to_s(ns0), self._to_s(ns1)
            worst = max(h0 - t0, h1 - t1)
            if lead is None or worst > lead:
                lead = worst
            out.append(Span(step, path, t0, t1, h0, h1))
        self.stats.max_host_lead_s = lead
        return out

    # -- anchors -----------------------------------------------------------------------------

    def step_ended(self) -> None:
        """Take a cheap anchor if `anchor_interval_s` has passed since the last one."""
        if self.config.anchor_interval_s is not None and _perf_ns() >= self._next_anchor_ns:
            self.take_anchor(hard=False)

    def take_anchor(self, hard: bool) -> None:
        """Tie the GPU's timeline to the host clock at this moment (see the module doc)."""
        torch = self._torch
        if hard:
            torch.cuda.synchronize(self.device)
        best = None
        for _ in range(5 if hard else 1):
            ev = self._new_event()
            h0 = _perf_ns()
            ev.record(self._side)
            ev.synchronize()
            h1 = _perf_ns()
            if best is None or h1 - h0 < best[2] - best[1]:
                best = (ev, h0, h1)
        ev, h0, h1 = best
        width_s = (h1 - h0) / 1e9
        if self.config.anchor_interval_s is not None:
            self._next_anchor_ns = h1 + int(self.config.anchor_interval_s * 1e9)
        if not hard and width_s > self.config.max_anchor_width_s:
            self.stats.n_rejected_anchors += 1
            return
        host_s = self._to_s((h0 + h1) // 2)
        if self._anchor_events:
            pev, pg = self._anchor_events[self.anchor_k]
            g = pg + pev.elapsed_time(ev) / 1e3
            k = self.anchor_k + 1
            prev = self._anchors[-1]
            dg, dh = g - prev.gpu_s, host_s - prev.host_s
            if dg >= 0.1 and not 0.99 < dh / dg < 1.01:
                # Two clocks of one machine never differ by 1%: this anchor is wrong.
                self.stats.n_rejected_anchors += 1
                log.warning("dropped a clock anchor implying a rate of %.4f", dh / dg)
                return
        else:
            g, k = 0.0, 0
        self._anchors.append(ClockAnchor(g, host_s, width_s / 2))
        self._anchor_events[k] = (ev, g)
        self.anchor_k = k
        self._cmap = None
        self.stats.n_anchors = len(self._anchors)

    def release_anchor_events(
        self, stack: Sequence[tuple], pending: deque[tuple[int, list[tuple]]]
    ) -> None:
        """Forget anchor events that no open (`stack`) or pending boundary refers to any more."""
        if len(self._anchor_events) <= 2:
            return
        refs = [self.anchor_k]
        refs.extend(e[4] for e in stack)
        refs.extend(recs[0][3] for _, recs in pending if recs)
        oldest = min(refs)
        for k in [k for k in self._anchor_events if k < oldest]:
            del self._anchor_events[k]

    def drift_ppm(self) -> float | None:
        """Drift of the GPU's timer against the host clock; None with fewer than two anchors."""
        if len(self._anchors) > 1:
            return self._clock_map().drift_ppm
        return None

    @property
    def anchors(self) -> list[ClockAnchor]:
        """The anchors taken so far."""
        return list(self._anchors)

    def release(self) -> None:
        """Drop the pooled and anchor events (at close)."""
        self._pool.clear()
        self._anchor_events.clear()
