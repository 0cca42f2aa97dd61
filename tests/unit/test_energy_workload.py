"""The energy-aware workloads in the registry: each builds, steps through a phase marker,
replays its phases and counts its FLOPs (registry-driven: every ea-* name)."""

import pytest

torch = pytest.importorskip("torch")

from jouleprof.timeline.markers import NullRecorder  # noqa: E402
from jouleprof.workloads import registry  # noqa: E402

EA = [n for n in registry.names() if n.startswith("ea-")]


def test_the_three_families_are_registered():
    assert EA == ["ea-cnn", "ea-mlp", "ea-vit"]


@pytest.mark.parametrize("name", EA)
def test_workload_steps_replays_and_counts(name):
    wl = registry.get(name)
    small = {"width": 16, "depth": 1, "heads": 2, "data_n": 60, "data_side": 8, "lam": 1e-2}
    cfg = wl.config("tiny", 8, None, small)
    assert wl.describe(cfg)["arch_overrides"]["width"] == 16
    s = wl.session(cfg, NullRecorder(), "fake")
    before = [p.detach().clone() for p in s.model.parameters()]
    assert s.step(sync=True) > 0 and s.step(sync=False, fixed=True) > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, s.model.parameters(), strict=True))
    for fn in s.replays().values():
        fn()
    facts = s.facts()
    assert (
        facts["parameters"]["total"] > 0 and facts["flops_per_sample"]["forward_backward_flops"] > 0
    )
    s.close()


def test_workload_refuses_unknown_presets_and_options():
    wl = registry.get("ea-vit")
    with pytest.raises(ValueError, match="vit-tiny"):
        wl.config("huge", None, None, {})
    with pytest.raises(ValueError, match="valid are"):
        wl.config("vit-tiny", None, None, {"colour": 1})
    with pytest.raises(ValueError, match="≥ 0"):
        wl.config("vit-tiny", None, None, {"lam": -1})


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("arch", "resnet", "choose one of mlp"),
        ("dataset", "svhn", "choose one of digits"),
        ("lam", float("nan"), "lam (λ) must be a finite number ≥ 0"),
        ("kind", "l0", "choose one of l1, l2, nonzero-macs"),
        ("reduction", "max", "reduction must be one of"),
        ("precision", "fp8", "precision must be one of ('fp32', 'bf16')"),
    ],
)
def test_a_cell_and_a_workload_refuse_the_same_bad_choice_alike(field, value, says):
    from jouleprof.workloads.energy_aware.cell import CellSpec
    from jouleprof.workloads.energy_aware.workload import EnergyAwareConfig

    for config in (CellSpec, EnergyAwareConfig):
        with pytest.raises(ValueError) as e:
            config(**{field: value})
        assert says in str(e.value), (config.__name__, str(e.value))
