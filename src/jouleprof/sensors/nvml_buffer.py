"""NVML's own power-sample buffer, kept beside a run: one sample every ~20 ms, read once a second.

The driver keeps the board's power sampled about every 20 ms for the last ~2.4 s
(`nvmlDeviceGetSamples(..., NVML_TOTAL_POWER_SAMPLES, since)`; on the H200 119 samples over
2.39 s, 0.35 ms of CPU a read, benchmarks/results/nvml_read_cost). That is 5 × the instant
field's refresh rate for a twentieth of the cost of polling it. On the H200 each sample
weighs about the 30 ms before its stamp (benchmarks/results/kernel_probe/f33ed69). The
samples are recorded in their own file (by fine mode, or `--power-buffer`); the phase
regression takes them as rows wherever they were recorded (`RegressionConfig.use_buffer`):

    power_buffer.csv: t_s (the run's clock), device, power_w, timestamp_us (the driver's)

The driver stamps samples in microseconds of wall-clock time; a pair of readings of the wall
clock and the run's clock taken at start maps them (both clocks tick at the same rate over a
run; NTP slews are parts per million).

A reader thread asks for the samples newer than the last one it has, every `every_s`, and
appends them to the file at once (bounded memory; a crash keeps what was read). A failed read
(NVML answers NOT_FOUND when no sample is new) is counted, never raised.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jouleprof.sensors.nvml import union_value

POWER_BUFFER_CSV = "power_buffer.csv"
POWER_BUFFER_COLUMNS = ("t_s", "device", "power_w", "timestamp_us")


class PowerBufferRecorder:
    """Copies each device's NVML power-sample buffer to a CSV file while a run lasts.

    Args:
        nv: the pynvml module (initialised, as an open NvmlSensor keeps it).
        handles: device name (as in samples.csv) → NVML handle.
        clock: the run's clock (`now_s()`).
        path: the CSV file to write.
        every_s: seconds between reads (the buffer holds ~2.4 s: keep this well under it).
    """

    def __init__(
        self,
        nv: Any,
        handles: Mapping[str, Any],
        clock: Any,
        path: Path,
        every_s: float = 1.0,
    ) -> None:
        if not 0 < every_s < 2.0:
            raise ValueError(
                f"every_s must be in (0, 2) s (the buffer holds ~2.4 s), got {every_s}"
            )
        self._nv, self._handles, self._every = nv, dict(handles), every_s
        # The pairing in whole µs, as the driver stamps: a stamp's offset from it is then exact,
        # and samples 20 ms apart are written 0.020000 s apart (as floats of ~1.7e9 s, stamps
        # lost ~0.2 µs each and neighbours could round a µs apart).
        self._wall0_us, self._run0_s = int(time.time() * 1e6), clock.now_s()
        self._last_us = dict.fromkeys(self._handles, self._wall0_us)
        self._file = open(path, "w", newline="")  # noqa: SIM115 (closed in stop)
        self._writer = csv.writer(self._file)
        self._writer.writerow(POWER_BUFFER_COLUMNS)
        self.n_samples = 0
        self.n_reads = 0
        self.n_failed_reads = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="jouleprof-power-buffer", daemon=True
        )
        self._thread.start()

    def read_once(self) -> int:
        """Read every device's new samples now and append them; how many were new."""
        with self._lock:
            new = 0
            for device, handle in self._handles.items():
                new += self._read_device(device, handle)
            self._file.flush()
            return new

    def _read_device(self, device: str, handle: Any) -> int:
        nv = self._nv
        self.n_reads += 1
        try:
            vtype, samples = nv.nvmlDeviceGetSamples(
                handle, nv.NVML_TOTAL_POWER_SAMPLES, self._last_us[device]
            )
        except Exception as e:  # NOT_FOUND: nothing new since the last read
            self.n_failed_reads += 1
            if len(self.errors) < 5 and str(e) not in self.errors:
                self.errors.append(str(e))
            return 0
        new = 0
        for s in samples:
            ts = int(s.timeStamp)
            mw = union_value(s.sampleValue, vtype)
            if ts <= self._last_us[device] or mw is None:
                continue
            t_s = self._run0_s + (ts - self._wall0_us) / 1e6
            self._writer.writerow((f"{t_s:.6f}", device, f"{mw / 1e3:.3f}", ts))
            self._last_us[device] = ts
            new += 1
        self.n_samples += new
        return new

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.read_once()

    def stop(self) -> dict[str, Any]:
        """Stop the thread, take a last read, close the file; a summary for run.json."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.read_once()
            self._file.close()
        return {
            "file": POWER_BUFFER_CSV,
            "n_samples": self.n_samples,
            "n_reads": self.n_reads,
            "n_failed_reads": self.n_failed_reads,
            "errors": self.errors,
            "note": "NVML's power-sample buffer (~20 ms samples), recorded for analysis; "
            "no default figure uses it (regression rows: jouleprof attribute --buffer-rows)",
        }


__all__ = ["POWER_BUFFER_COLUMNS", "POWER_BUFFER_CSV", "PowerBufferRecorder"]
