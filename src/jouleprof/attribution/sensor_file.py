"""A GPU's power-buffer lag, fitted on one run and carried to others (`--save-sensor`,
`--sensor`).

The lag between a power-buffer sample's window and its stamp is mostly the sensor's (on H100s
jouleprof's lag loop fitted 3.5-4.0 ms on three boards, and varied runs of two loops 3.7-3.8
ms; a ViT loop's varied runs fitted 4.5-4.8 ms in two other calls, so it moves by up to 1 ms
with the board or the load); but a run whose steps are all alike cannot pin it: the fit
settles wherever the loop's misfit leads. On an H100, three plain 60 s runs of one inference
loop fitted 5.9, 6.0 and 6.2 ms: two left its loss unresolved, and the third put the loss
34 % low and its two largest phases 3–7 % off (the lag's profile, `attribution.lag_profile`,
widens such a run's intervals, but cannot tell which lag is right). The same loop with short
gaps between phases in 18 % of its steps (excitation), or with long idle gaps, fitted 3.74
and 3.79 ms at a sharp minimum, and met ±5 % on every phase of ≥ 10 %. With 3.75 ± 0.5 ms
as the prior, every phase of ≥ 10 % of the three plain runs came out inside its interval,
and two of them met the target (benchmarks/results/ref_loops/README.md, "The buffer's lag
from a varied run").

So a run measured with varied steps writes its fitted lag to a small JSON file, and
attribution of any run on the same GPU model (best: the same machine, a similar load) takes
it as the lag's prior (`options`), σ SENSOR_LAG_SD_S: the fit still refines it, and the
intervals still carry the lag's spread (the profile then spans the prior's ±2σ, so they come
out narrower than without the file).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from jouleprof.attribution.result import DeviceAttribution
from jouleprof.timeline.excite import GAP_PHASE

SENSOR_SCHEMA = 1
SENSOR_LAG_SD_S = 0.0005
"""The prior σ of a lag carried from another run: the two varied H100 runs of one loop fitted
3.74 and 3.79 ms; the spread between loops on one card that the intervals carry (0.8 ms,
`RegressionConfig.buffer_lag_floor_sd_s`) stays."""


class SensorFileError(ValueError):
    """A sensor file that cannot be written or used (the message says why and what to do)."""


@dataclass(frozen=True)
class SensorFit:
    """The power buffer's lag as one run fitted it."""

    gpu: str
    """The GPU model the run measured (run.json's hardware)."""
    buffer_lag_s: float
    """How long before its stamp a buffer sample's window ends, as fitted."""
    buffer_lag_sd_s: float
    """The fit's own posterior σ of it."""
    buffer_window_s: float
    """The buffer kernel's length the run's samples chose (for reference; not carried)."""
    varied: bool
    """Whether the run varied its steps on purpose (excitation gaps): only then is the lag
    pinned by the loop's own edges rather than by its misfit."""
    from_run: str
    device: str
    n_buffer_rows: int
    schema: int = SENSOR_SCHEMA

    def options(self, lag_sd_s: float = SENSOR_LAG_SD_S) -> dict[str, float]:
        """The regression options that take this lag as the prior (`RegressionConfig`)."""
        return {"buffer_lag_s": self.buffer_lag_s, "buffer_lag_sd_s": lag_sd_s}


def run_gpu_models(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """device → GPU model, as the run's run.json recorded them (empty where it recorded none
    or has no readable run.json)."""
    from jouleprof.errors import RunDirError
    from jouleprof.store.rundir import RunDir

    try:
        hw = RunDir(run_dir).read_record().hardware
    except RunDirError:
        return {}
    return {g["device"]: g["name"] for g in hw.get("gpus") or () if "device" in g and "name" in g}


def fit_of_run(dev: DeviceAttribution, run_dir: str | os.PathLike[str]) -> SensorFit:
    """The lag a regression attribution of `run_dir` fitted on one device, its GPU model as
    the run recorded it (`from_attribution`)."""
    gpu = run_gpu_models(run_dir).get(dev.device, "unknown GPU")
    return from_attribution(dev, gpu, str(run_dir))


def from_attribution(dev: DeviceAttribution, gpu: str, run: str) -> SensorFit:
    """The lag a regression attribution fitted on one device.

    Raises:
        SensorFileError: the attribution did not use the power buffer's rows.
    """
    buf = (dev.diagnostics or {}).get("buffer")
    if dev.method != "regression" or not buf:
        raise SensorFileError(
            f"{run} ({dev.device}): the regression used no power-buffer rows, so it fitted no "
            "lag to save; record NVML's power buffer on a GPU that has one (jouleprof.profile "
            "records it, as do jouleprof profile and jouleprof measure --power-buffer); a "
            "simulated GPU has none"
        )
    return SensorFit(
        gpu=gpu,
        buffer_lag_s=float(buf["lag_fitted_s"]),
        buffer_lag_sd_s=float(buf["lag_sd_s"]),
        buffer_window_s=float(buf["window_s"]),
        varied=any(p.phase == GAP_PHASE for p in dev.phases),
        from_run=run,
        device=dev.device,
        n_buffer_rows=int(buf["n_rows"]),
    )


def write_sensor(path: str | os.PathLike[str], fit: SensorFit) -> Path:
    p = Path(path)
    try:
        p.write_text(json.dumps(asdict(fit), indent=2) + "\n")
    except OSError as e:
        raise SensorFileError(f"cannot write the sensor file {p}: {e.strerror or e}") from e
    return p


def read_sensor(path: str | os.PathLike[str]) -> SensorFit:
    """Read a sensor file written by `write_sensor`.

    Raises:
        SensorFileError: missing, unreadable, or not a sensor file.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise SensorFileError(
            f"no sensor file {p}: write one with jouleprof attribute RUN --save-sensor {p}"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SensorFileError(f"{p} is not a sensor file (unreadable JSON: {e})") from e
    fields = SensorFit.__dataclass_fields__
    if not isinstance(doc, dict) or not {"gpu", "buffer_lag_s"} <= set(doc):
        raise SensorFileError(f"{p} is not a sensor file (no gpu and buffer_lag_s in it)")
    if doc.get("schema", SENSOR_SCHEMA) > SENSOR_SCHEMA:
        raise SensorFileError(f"{p} was written by a newer jouleprof (schema {doc['schema']})")
    try:
        fit = SensorFit(**{k: v for k, v in doc.items() if k in fields})
    except TypeError as e:
        raise SensorFileError(f"{p} is not a complete sensor file: {e}") from e
    lag = fit.buffer_lag_s
    if not isinstance(lag, int | float) or not 0.0 <= lag < 0.1:
        raise SensorFileError(f"{p}: buffer_lag_s {lag!r} is not a lag in seconds (0 to 0.1)")
    return fit


def check_gpu(fit: SensorFit, gpu: str | None, where: str) -> None:
    """Raise SensorFileError where the run measured another GPU model than the file's."""
    if gpu is not None and gpu != fit.gpu:
        raise SensorFileError(
            f"the sensor file is from an {fit.gpu} ({fit.from_run}), {where} measured an {gpu}: "
            "write one on this GPU model (jouleprof attribute RUN --save-sensor FILE)"
        )


def check_run(fit: SensorFit, run_dir: str | os.PathLike[str], device: str | None = None) -> None:
    """`check_gpu` for each GPU the run recorded (only `device`'s where one is given)."""
    for dev, model in run_gpu_models(run_dir).items():
        if device is None or dev == device:
            check_gpu(fit, model, f"{run_dir}'s {dev}")
