"""The instant-power reader reuses one NVML field array and decodes it like pynvml does.

No driver here: pynvml's own ctypes structures, with a stand-in for the C function.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pynvml = pytest.importorskip("pynvml")

from jouleprof.sensors.nvml import POWER_INSTANT_FIELD, instant_field_reader  # noqa: E402


def _fake_nv(values_mw, returns=None):
    calls = []

    def get_field_values(handle, count, ref):
        arr = ref._obj  # the array byref() points at
        calls.append((handle, count.value, arr[0].fieldId, id(arr)))
        arr[0].nvmlReturn = 0 if returns is None else returns[len(calls) - 1]
        arr[0].valueType = 1  # unsigned int
        arr[0].value.uiVal = values_mw[len(calls) - 1]
        return pynvml.NVML_SUCCESS

    nv = SimpleNamespace(
        c_nvmlFieldValue_t=pynvml.c_nvmlFieldValue_t,
        _nvmlGetFunctionPointer=lambda name: get_field_values,
        _nvmlCheckReturn=pynvml._nvmlCheckReturn,
        nvmlDeviceGetFieldValues=None,
    )
    return nv, calls


def test_reads_decode_and_reuse_one_array():
    nv, calls = _fake_nv([71_250, 650_000, 0])
    read = instant_field_reader(nv, "handle0")
    assert [read(), read(), read()] == [71_250.0, 650_000.0, 0.0]
    assert {c[:3] for c in calls} == {("handle0", 1, POWER_INSTANT_FIELD)}
    assert len({c[3] for c in calls}) == 1  # the same array every read


def test_a_field_error_is_none_not_zero():
    nv, _ = _fake_nv([5, 5], returns=[pynvml.NVML_ERROR_NOT_SUPPORTED, 0])
    read = instant_field_reader(nv, "h")
    assert read() is None
    assert read() == 5.0


def test_without_pynvmls_private_helpers_it_uses_the_public_call():
    seen = []

    def public(handle, fields):
        seen.append((handle, fields))
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=123))]

    read = instant_field_reader(SimpleNamespace(nvmlDeviceGetFieldValues=public), "h")
    assert read() == 123.0 and seen == [("h", [POWER_INSTANT_FIELD])]
