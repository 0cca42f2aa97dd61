"""Probe what this machine can measure: every signal, its detected refresh period, read costs."""

from __future__ import annotations

from typing import Any

import numpy as np

from jouleprof.clock import MonotonicClock
from jouleprof.sensors.refresh import detect_refresh
from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig

PERIODIC_SIGNALS = ("power_w", "power_instant_w", "energy_j")


def probe_sensors(
    probe_s: float = 2.0, interval_s: float = 0.005, rapl: bool = True
) -> dict[str, Any]:
    """Open every sensor, read it fast for `probe_s` seconds, and describe what was seen.

    The counter is read on every poll here (unlike during a run) so that its own refresh period
    can be detected too. Returns a JSON-ready dict with "signals" rows and "notes".
    """
    from jouleprof.sensors.discover import open_sensors

    with open_sensors(None, rapl=rapl) as found:
        notes = list(found.notes)
        rows: list[dict[str, Any]] = []
        if not found.sensors:
            notes.append("nothing can be measured here but time")
        sink = ListSink()
        cfg = SamplerConfig(interval_s=interval_s, counter_interval_s=0.0)
        sampler = Sampler(found.sensors, sink, cfg, clock=MonotonicClock())
        if found.sensors:
            with sampler:
                MonotonicClock().sleep_s(probe_s)
        by_dev: dict[str, list] = {}
        for s in sink.samples:
            by_dev.setdefault(s.device, []).append(s)
        for sensor in found.sensors:
            for info in sensor.signals():
                row: dict[str, Any] = {
                    "device": info.device,
                    "signal": info.signal,
                    "available": info.available,
                    "note": info.reason,
                    "sensor": sensor.kind,
                }
                samples = by_dev.get(info.device, [])
                if info.available and info.signal in PERIODIC_SIGNALS and samples:
                    t = np.array([s.t_s for s in samples])
                    v = np.array(
                        [
                            np.nan if getattr(s, info.signal) is None else getattr(s, info.signal)
                            for s in samples
                        ],
                        dtype=float,
                    )
                    est = detect_refresh(t, v, info.signal, min_updates=5)
                    if est is not None:
                        row["refresh_period_s"] = est.period_s
                        row["refresh_jitter_s"] = est.jitter_s
                    else:
                        row["refresh_note"] = "no regular updates detected in the probe"
                rows.append(row)
        for info in found.unavailable:
            if info.signal == "*":
                rows.append(
                    {
                        "device": info.device,
                        "signal": "all",
                        "available": False,
                        "note": info.reason,
                    }
                )
        stats = sampler.stats
        return {
            "signals": rows,
            "notes": notes,
            "probe": {
                "probe_s": probe_s,
                "interval_s": interval_s,
                "mean_counter_read_s": stats.mean_counter_read_s,
                "max_counter_read_s": stats.max_counter_read_s or None,
                "mean_read_s": stats.read_time_s / stats.n_reads if stats.n_reads else None,
                "n_polls": stats.n_polls,
            },
        }
