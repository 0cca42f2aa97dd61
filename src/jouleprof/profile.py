"""`with jouleprof.profile("runs/x") as prof:` — measure a training loop phase by phase.

One object for a user's own loop: it measures in fine style (the energy counter at every
refresh, 20 ms power reads, NVML's power buffer where the GPU offers it), records the phases
the loop marks, and on exit attributes the energy to them and prints the phase table::

    import jouleprof

    with jouleprof.profile("runs/mine") as prof:
        for batch in loader:
            with prof.step():
                with prof.phase("data"):
                    x, y = batch[0].cuda(non_blocking=True), batch[1].cuda(non_blocking=True)
                with prof.phase("forward"):
                    loss = model(x, y)
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("optimizer"):
                    opt.step(); opt.zero_grad()
    print(prof.phases)            # the phase table (a DataFrame), also in runs/mine/phases.csv

Attribution is the regression, falling back to the proportional split where the regression
cannot be made (too few sensor intervals, say); the method column says which. On a machine
with no NVIDIA GPU the recorded phase times drive the package's simulated GPU instead, and
every figure from it is labelled simulated (see `jouleprof.bench.simulate`).

Underneath it is `jouleprof.measure` and a `PhaseRecorder`, which stay available for loops that
need them separately.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from jouleprof.errors import JouleprofError

log = logging.getLogger(__name__)

METHODS = ("regression", "proportional")


class profile:  # noqa: N801 - used as `with jouleprof.profile(...)`, like a function
    """Measure, record phases, attribute and print, around a `with` block.

    Args:
        out: the run directory to create; None: jouleprof-runs/<run_id>.
        gpus: GPU indices to measure (None: every visible GPU).
        interval_s: period of the cheap power reads.
        power_buffer: also record NVML's ~20 ms power-sample buffer (the regression's densest
            rows) where the GPU offers it.
        warmup_steps: leading steps the attribution excludes; None: until step times settle.
        report: print the phase table on exit (to stderr/stdout through rich).
        attribute: attribute the energy to the phases on exit (False: only record).
        simulate: where no NVIDIA GPU was measured, drive the simulated GPU with the recorded
            phase times (None or True: do so; False: do not).
        sync: time phases by synchronizing the device at every boundary (the classic, slower
            method, for comparison) instead of CUDA events.
        device: the CUDA device the phases run on (None: the current one, else host times).
        excite: opt-in excitation: an `ExciteConfig` (or True for its defaults) puts short
            random gaps between the phases of some steps in a calibration window, so that
            phases of a fixed schedule become separable (docs/excitation.md). None: off.
        repeat: opt-in phase repetition: a `RepeatConfig` (or True for its defaults) runs the
            phases given to `prof.replay(name, fn)` twice in some steps of a calibration
            window (docs/excitation.md, "Repeated phases"). None: each runs once.
        sensor: a sensor file (`jouleprof attribute --save-sensor`, `jouleprof sensors
            --lag-out`) or a `SensorFit`: the regression on exit takes its power-buffer lag as
            the prior, where the run measured the same GPU model (docs/attribution.md).

    After the block: `prof.run_dir` (Path), `prof.phases` (the phases table, a DataFrame, or
    None), `prof.method` (which method made it), `prof.summary` (the run's figures),
    `prof.measurement` (the underlying `Measurement`), `prof.recorder` (the `PhaseRecorder`).
    """

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        gpus: tuple[int, ...] | list[int] | None = None,
        interval_s: float = 0.02,
        power_buffer: bool = True,
        warmup_steps: int | None = None,
        report: bool = True,
        attribute: bool = True,
        simulate: bool | None = None,
        sync: bool = False,
        device: Any = None,
        excite: Any = None,
        repeat: Any = None,
        sensor: Any = None,
    ) -> None:
        from jouleprof.timeline.excite import ExciteConfig
        from jouleprof.timeline.opt_in import opt_in
        from jouleprof.timeline.repeat import repeat_config

        if out is not None and not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"the run directory is a path (str or Path), got {out!r}")
        if warmup_steps is not None and warmup_steps < 0:
            raise ValueError(f"warmup_steps must be ≥ 0 or None, got {warmup_steps}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s}; try 0.02")
        self.out = out
        self.gpus = tuple(gpus) if gpus is not None else None
        self.interval_s = interval_s
        self.power_buffer = power_buffer
        self.warmup_steps = warmup_steps
        self.report = report
        self.do_attribute = attribute
        self.simulate = simulate
        self.sync = sync
        self.device = device
        self.excite = opt_in(excite, ExciteConfig, "excite")
        self.repeat = repeat_config(repeat)
        self.sensor = _sensor_fit(sensor)
        self.measurement: Any = None
        self.recorder: Any = None
        self.run_dir: Path | None = None
        self.phases: Any = None
        self.method: str | None = None
        self._cm: Any = None

    # -- the loop's interface ------------------------------------------------------------------

    def step(self):
        """Context of one training step."""
        return self._rec().step()

    def phase(self, name: str):
        """Context of one phase inside (or just before) a step; phases nest ("forward/x")."""
        return self._rec().phase(name)

    def replay(self, name: str, fn, *args, **kwargs):
        """Run `fn(*args, **kwargs)` as phase `name`, twice in the steps that `repeat=` draws
        (`PhaseRecorder.replay`: `fn` must have no effect but its cost); returns its result."""
        return self._rec().replay(name, fn, *args, **kwargs)

    def _rec(self):
        if self.recorder is None:
            raise JouleprofError(
                "prof.step() and prof.phase() work inside `with jouleprof.profile(...) as prof:`"
            )
        return self.recorder

    @property
    def summary(self) -> dict[str, Any]:
        return self.measurement.summary if self.measurement is not None else {}

    # -- the context ---------------------------------------------------------------------------

    def __enter__(self) -> profile:
        from jouleprof.bench.modes import Mode
        from jouleprof.measurement import measure
        from jouleprof.timeline.recorder import PhaseRecorder

        cfg = replace(
            Mode.FINE.measure_config(self.gpus, self.interval_s),
            kind="profile",
            power_buffer=self.power_buffer,
        )
        self._cm = measure(
            self.out,
            cfg,
            run_config={
                "profile": {
                    "sync": self.sync,
                    "excite": self.excite is not None,
                    "repeat": self.repeat is not None,
                }
            },
        )
        m = self._cm.__enter__()
        self.measurement = m
        self.run_dir = m.run_dir.path
        try:
            self.recorder = PhaseRecorder(
                m.clock,
                m.span_writer(),
                device=self.device,
                sync=self.sync,
                record=m.record,
                excite=self.excite,
                repeat=self.repeat,
            )
        except BaseException as e:
            self._cm.__exit__(type(e), e, e.__traceback__)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.recorder.close()
        finally:
            # measure() marks the run complete, or incomplete after an exception (data kept).
            suppressed = self._cm.__exit__(exc_type, exc, tb)
        if exc_type is None and self.do_attribute:
            self._attribute()
        return bool(suppressed)

    # -- after the block -----------------------------------------------------------------------

    def _attribute(self) -> None:
        from jouleprof.bench.simulate import gpu_was_measured, simulate_run
        from jouleprof.cli.console import note, working
        from jouleprof.store.rundir import RunDir

        rd = RunDir(self.run_dir)
        if not rd.has("spans.csv") or (rd.path / "spans.csv").stat().st_size == 0:
            note("jouleprof.profile: no phases were recorded (use prof.step()/prof.phase())")
            return
        quiet = not self.report
        if not gpu_was_measured(rd):
            if self.simulate is False:
                if not quiet:
                    note("jouleprof.profile: no NVIDIA GPU was measured: nothing to attribute")
                return
            gpu = self.measurement.summary.get("gpu_energy_j")
            why = (getattr(gpu, "reason", None)) or "no NVIDIA GPU was measured"
            with working("no NVIDIA GPU: attributing a simulated GPU's energy…", quiet=quiet):
                try:
                    info = simulate_run(rd.path, why, warmup_steps=self.warmup_steps)
                except JouleprofError as e:
                    note(f"jouleprof.profile: simulated GPU not run: {e}")
                    return
            self.method = info.get("phases_csv_method")
            if self.method is None and not quiet:  # every method failed: say why
                from jouleprof.cli.attribute import attribution_failures

                for line in attribution_failures(rd.read_record().extra):
                    note(f"jouleprof.profile: {line}")
        else:
            self.method = self._attribute_measured(rd, quiet)
        if rd.has("phases.csv"):
            self.phases = rd.read_phases()
        if self.report:
            self._print()

    def _attribute_measured(self, rd, quiet: bool) -> str | None:
        """Regression, then proportional: phases_<method>.csv each, phases.csv the first that
        succeeds; run.json extra.attribution says what each did."""
        from jouleprof.attribution.api import attribute
        from jouleprof.attribution.excitation import record_costs
        from jouleprof.cli.console import note, working

        status: dict[str, Any] = {}
        chosen = None
        lag = self._sensor_options(rd, quiet)
        for method in METHODS:
            opts = lag if method == "regression" else {}
            try:
                with working(f"attributing by {method}…", quiet=quiet):
                    res = attribute(rd.path, method, warmup_steps=self.warmup_steps, **opts)
            except JouleprofError as e:
                status[method] = {"ok": False, "reason": str(e)}
                if not quiet:
                    note(f"attribution by {method} not possible: {e}")
                continue
            df = res.to_frame()
            rd.write_phases(df, f"phases_{method}.csv")
            status[method] = {"ok": True}
            if opts:
                status[method]["buffer_lag_prior_s"] = opts["buffer_lag_s"]
            record_costs(status[method], res)  # what the excitation or the repeats cost
            if chosen is None:
                rd.write_phases(df)
                chosen = method
        rec = rd.read_record()
        rec.extra["attribution"] = status
        rec.extra["attribution_phases_csv"] = chosen
        rd.write_record(rec)
        return chosen

    def _sensor_options(self, rd, quiet: bool) -> dict[str, float]:
        """The sensor file's regression options, or none where it is from another GPU model."""
        from jouleprof.attribution.sensor_file import SENSOR_LAG_SD_S, SensorFileError, check_run
        from jouleprof.cli.console import note

        if self.sensor is None:
            return {}
        try:
            check_run(self.sensor, rd.path)
        except SensorFileError as e:
            note(f"jouleprof.profile: sensor file not used: {e}")
            return {}
        if not quiet:
            note(f"jouleprof.profile: buffer lag {1e3 * self.sensor.buffer_lag_s:.2f} ms "
                 f"±{1e3 * SENSOR_LAG_SD_S:g} from {self.sensor.from_run}")  # fmt: skip
        return self.sensor.options()

    def _print(self) -> None:
        from rich.markup import escape

        from jouleprof.attribution.excitation import recorded_costs
        from jouleprof.cli.attribute import print_phases_file
        from jouleprof.cli.console import err_console, note
        from jouleprof.store.rundir import RunDir

        print_phases_file(self.run_dir)
        rec = RunDir(self.run_dir).read_record()
        for line in recorded_costs(rec.extra):
            note(line)
        sim = rec.extra.get("simulated_gpu")
        if sim:
            err_console.print(f"[bold magenta]{escape(sim['note'])}[/]", highlight=False)
        note(f"run directory: {self.run_dir}")


def _sensor_fit(sensor: Any):
    """A `SensorFit` from a sensor file's path, as given, or None.

    Raises:
        SensorFileError: a path that is not a readable sensor file (checked before the run).
    """
    from jouleprof.attribution.sensor_file import SensorFit, read_sensor

    if sensor is None or isinstance(sensor, SensorFit):
        return sensor
    return read_sensor(sensor)
