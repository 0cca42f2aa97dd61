"""Where a training step's energy goes, per phase: three methods over recorded data.

- proportional: the measured energy split by time share (the usual estimate; the baseline).
- regression: every sensor interval is an equation in the phases' powers, solved over all steps
  (measures phases shorter than the sensor's refresh period).
- isolation: replay loops of each phase measured alone, differenced (the slow reference).

All are pure functions of a run directory's samples.csv and spans.csv: `attribute(run_dir,
method)` returns an `AttributionResult`, and `write_phases` stores it as phases.csv.
"""

from __future__ import annotations

from jouleprof.attribution.api import METHODS, attribute, write_phases
from jouleprof.attribution.common import IDLE, UNTRACKED, auto_warmup_steps, build_timeline
from jouleprof.attribution.isolation import (
    IsolationResult,
    per_call_energies,
    read_isolation_csv,
    write_isolation_csv,
)
from jouleprof.attribution.regression import RegressionConfig
from jouleprof.attribution.result import (
    AttributionResult,
    DeviceAttribution,
    PhaseResult,
    compare,
)
from jouleprof.attribution.sensor_file import SensorFit, read_sensor, write_sensor

__all__ = [
    "IDLE",
    "METHODS",
    "UNTRACKED",
    "AttributionResult",
    "DeviceAttribution",
    "IsolationResult",
    "PhaseResult",
    "RegressionConfig",
    "SensorFit",
    "attribute",
    "auto_warmup_steps",
    "read_sensor",
    "write_sensor",
    "build_timeline",
    "compare",
    "per_call_energies",
    "read_isolation_csv",
    "write_isolation_csv",
    "write_phases",
]
