"""Measurement modes: the enum, validation, the factory, and the "not installed" path."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from jouleprof.bench import modes
from jouleprof.bench.modes import Mode, ModeUnavailable, make_marker, unavailable_reason
from jouleprof.clock import ManualClock
from jouleprof.errors import JouleprofError
from jouleprof.timeline.markers import NullRecorder
from jouleprof.timeline.recorder import PhaseRecorder


def test_parse_and_properties():
    assert Mode.parse("FINE") is Mode.FINE
    assert Mode.parse(" e2e ") is Mode.E2E
    assert Mode.parse(Mode.ZEUS) is Mode.ZEUS
    with pytest.raises(ValueError, match="baseline, e2e, fine, codecarbon, zeus"):
        Mode.parse("turbo")
    assert [m.sampler for m in Mode] == ["none", "coarse", "continuous", "none", "none"]
    assert Mode.FINE.measure_config().counter_interval_s == 0.1
    assert Mode.E2E.measure_config().counter_interval_s == 1.0
    assert Mode.BASELINE.measure_config().gpus == ()
    assert [m.records_phases for m in Mode] == [False, False, True, False, False]
    assert Mode.CODECARBON.package == "codecarbon" and Mode.FINE.package is None
    assert str(Mode.FINE) == "fine"


def test_make_marker():
    assert isinstance(make_marker("baseline"), NullRecorder)
    assert isinstance(make_marker(Mode.E2E), NullRecorder)
    rec = make_marker("fine", ManualClock(), device="cpu")
    assert isinstance(rec, PhaseRecorder) and rec.mode == "host"
    with pytest.raises(ValueError, match="clock"):
        make_marker("fine")


def test_core_modes_always_available():
    for m in ("baseline", "e2e", "fine"):
        assert unavailable_reason(m) is None
        assert modes.require(m) is Mode.parse(m)


@pytest.mark.parametrize("mode", ["codecarbon", "zeus"])
def test_not_installed_cross_check_says_how_to_install(mode, monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == mode else real(name, *a)
    )
    reason = unavailable_reason(mode)
    how = f"pip install 'jouleprof[crosscheck]' (or pip install {mode})"
    assert reason == f"{mode} is not installed: {how}"
    with pytest.raises(ModeUnavailable, match=re.escape(how)) as e:
        modes.require(mode)
    assert isinstance(e.value, ImportError) and isinstance(e.value, JouleprofError)
    with pytest.raises(ModeUnavailable), modes.crosscheck(mode, tmp_path):
        pass
    cell = modes.unavailable_cell(mode, reason)
    assert cell == {"mode": mode, "status": "unavailable", "reason": reason}


def test_crosscheck_refuses_non_crosscheck_modes(tmp_path):
    with pytest.raises(ValueError, match="not a cross-check"), modes.crosscheck("fine", tmp_path):
        pass


def test_import_of_modes_stays_light():
    # The modes module must not pull in the cross-check tools or torch.
    assert "codecarbon" not in sys.modules and "zeus" not in sys.modules


def test_codecarbon_without_a_gpu_is_unavailable_not_zero(tmp_path):
    pytest.importorskip("codecarbon")
    from jouleprof.sensors.discover import open_sensors

    with open_sensors(None, rapl=False) as found:
        if found.sensors:
            pytest.skip("a GPU is present: this checks the no-GPU path")
    with modes.crosscheck("codecarbon", tmp_path, None) as cc:
        pass
    assert cc.gpu_energy_j is None and "no GPU" in cc.reason
