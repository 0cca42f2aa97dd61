"""FLOPs per training sample: the counter against a hand count, and vit_huge without memory."""

from __future__ import annotations

import functools
import resource
import sys

import pytest

from jouleprof.workloads.vjepa2 import get_preset, preset_names
from jouleprof.workloads.vjepa2.flops import flops_per_sample, mask_token_counts


@functools.cache
def counted(name: str) -> dict:
    return flops_per_sample(get_preset(name), method="counter")


def hand_count(name: str) -> dict[str, int]:
    """Layer by layer, 2 FLOPs per multiply-add, for one clip."""
    c = get_preset(name)
    context, target = mask_token_counts(c)
    d, dp, n = c.encoder_width, c.predictor_width, c.num_tokens

    def block(tokens: int, width: int) -> int:
        qkv = 2 * tokens * width * 3 * width
        scores = 2 * tokens * tokens * width  # q·kᵀ, all heads together
        mix = 2 * tokens * tokens * width  # attention · v
        proj = 2 * tokens * width * width
        mlp = 2 * 2 * tokens * width * 4 * width
        return qkv + scores + mix + proj + mlp

    conv = 2 * n * d * (3 * 2 * 16 * 16)  # one output value per token and channel
    target_fwd = conv + c.encoder_depth * block(n, d)
    context_fwd = 0
    context_bwd = 0
    for kc, kt in zip(context, target, strict=True):
        trunk = c.encoder_depth * block(kc, d)
        predictor = 2 * kc * d * dp + c.predictor_depth * block(kc + kt, dp) + 2 * kt * dp * d
        context_fwd += conv + trunk + predictor
        # Grad of inputs and of weights for every matmul; the conv needs the weight grad only.
        context_bwd += conv + 2 * (trunk + predictor)
    return {"fwd": target_fwd + context_fwd, "bwd": context_bwd, "ctx": context_fwd}


def test_tiny_matches_a_hand_count():
    flops = flops_per_sample(get_preset("tiny"))  # method "auto" takes the counter
    assert flops["method"] == "flop_counter_meta"
    hand = hand_count("tiny")
    assert flops["forward_flops"] == pytest.approx(hand["fwd"], rel=0.02)
    assert flops["context_backward_flops"] == pytest.approx(hand["bwd"], rel=0.02)


def test_vit_huge_is_counted_without_allocating_the_model():
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    flops = flops_per_sample(get_preset("vit_huge"))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    kib = 1 if sys.platform != "darwin" else 1024  # ru_maxrss: KiB on Linux, bytes on macOS
    assert grown * kib < 1024 * 1024, "the 1.3e9-parameter pair would need over 5 GB"
    assert flops["method"] == "flop_counter_meta"
    assert flops["clip_tokens"] == 1568
    assert flops["forward_flops"] == pytest.approx(hand_count("vit_huge")["fwd"], rel=0.01)
    # About 3.3 TFLOP forward per clip: ViT-H over 1568 tokens is ~2.4 TFLOP alone.
    assert 2.5e12 < flops["forward_flops"] < 5e12


# Not tiny: there the tubelet conv, whose backward is 1× (its input needs no grad), outweighs
# the 64-wide blocks, so the ratio is ~2.3; hand_count checks that case exactly.
@pytest.mark.parametrize("name", ["vit_base", "vit_huge"])
def test_backward_is_twice_the_trained_forward(name):
    f = counted(name)
    trained = f["context_forward_flops"]
    # fwd+bwd of what is trained is ~3× its forward.
    assert (trained + f["context_backward_flops"]) / trained == pytest.approx(3.0, rel=0.05)
    # The target encoder runs forward only, so the whole step is less than 3× its forward.
    total = f["forward_backward_flops"]
    assert total == f["forward_flops"] + f["context_backward_flops"]
    assert 1.0 < total / f["forward_flops"] < 3.0


@pytest.mark.parametrize("name", preset_names())
def test_counter_and_analytic_agree(name):
    analytic = flops_per_sample(get_preset(name), method="analytic")
    assert analytic["method"] == "analytic"
    for key in ("forward_flops", "forward_backward_flops"):
        assert counted(name)[key] == pytest.approx(analytic[key], rel=0.01)


def test_unknown_method():
    with pytest.raises(ValueError, match="method"):
        flops_per_sample(get_preset("tiny"), method="guess")


def test_the_count_is_cached_per_config(monkeypatch, tmp_path):
    from jouleprof.workloads.vjepa2 import flops as flops_mod

    monkeypatch.setenv("JOULEPROF_CACHE_DIR", str(tmp_path))
    first = flops_per_sample(get_preset("tiny"))
    assert list((tmp_path / "flops").glob("*.json"))

    def no_counting(config):
        raise AssertionError("the cached count should have been used")

    monkeypatch.setattr(flops_mod, "counted_flops", no_counting)
    assert flops_per_sample(get_preset("tiny")) == first
    # Another config is another entry: counting is attempted (and here falls back, uncached).
    other = flops_per_sample(get_preset("tiny", batch_size=3))
    assert other["method"] == "analytic"
    assert len(list((tmp_path / "flops").glob("*.json"))) == 1
