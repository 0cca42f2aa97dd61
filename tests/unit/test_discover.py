"""Sensor discovery on a machine without an NVIDIA driver, and the pure parts of the NVML sensor."""

from __future__ import annotations

from pathlib import Path

import pytest

from jouleprof.errors import SensorError
from jouleprof.sensors.discover import open_sensors
from jouleprof.sensors.nvml import (
    decode_field_value,
    parse_visible_devices,
    redact_visible_devices,
)


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


no_driver = pytest.mark.skipif(nvml_works(), reason="an NVIDIA driver is present here")


def fake_rapl(root: Path) -> Path:
    d = root / "intel-rapl:0"
    d.mkdir(parents=True)
    (d / "name").write_text("package-0\n")
    (d / "energy_uj").write_text("123\n")
    (d / "max_energy_range_uj").write_text("1000000\n")
    return root


@no_driver
def test_no_driver_is_a_reason_when_gpus_were_not_asked_for(tmp_path: Path) -> None:
    with open_sensors(None, rapl_root=fake_rapl(tmp_path)) as found:
        assert [s.kind for s in found.sensors] == ["rapl"]
        assert not any(d.startswith("gpu") for d in found.devices)
        [gpu] = [u for u in found.unavailable if u.device == "gpu"]
        assert not gpu.available and "driver" in gpu.reason
        assert any("driver" in n for n in found.notes)


@no_driver
def test_requested_gpu_without_driver_raises() -> None:
    with pytest.raises(SensorError, match=r"GPU\(s\) \[0\] were requested.*driver"):
        open_sensors([0], rapl=False)


def test_no_gpu_and_no_rapl(tmp_path: Path) -> None:
    found = open_sensors([], rapl_root=tmp_path / "none")
    assert found.sensors == []
    assert "no powercap directory" in found.unavailable[0].reason
    found.close()


def test_parse_visible_devices() -> None:
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices("2, 0") == ["2", "0"]
    assert parse_visible_devices("1,-1,0") == ["1"]  # CUDA stops at the first invalid entry
    assert parse_visible_devices("GPU-abc,MIG-def,x,3") == ["GPU-abc", "MIG-def"]


def test_redact_visible_devices_hides_uuids() -> None:
    raw = "0,GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,MIG-1234"
    red = redact_visible_devices(raw)
    assert red == "0,GPU-<uuid>,MIG-<uuid>"
    assert "8932" not in red and "1234" not in red
    assert redact_visible_devices(None) is None


def test_decode_field_value_by_type() -> None:
    import pynvml  # only its ctypes structures: no library call

    fv = pynvml.c_nvmlFieldValue_t()
    fv.nvmlReturn = 0
    fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    fv.value.uiVal = 123_456
    assert decode_field_value(fv) == 123_456.0
    fv.valueType = pynvml.NVML_VALUE_TYPE_DOUBLE
    fv.value.dVal = 1.5
    assert decode_field_value(fv) == 1.5
    fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    fv.value.ullVal = 2**40
    assert decode_field_value(fv) == float(2**40)
    fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert decode_field_value(fv) is None
