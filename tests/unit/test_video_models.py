"""The video-classifier registry: one (B, T, C, H, W) interface per family (tiny configs),
normalization, the Swin3D attention patch, weight loading from a local path, checkpointing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from jouleprof.workloads.video.models import (  # noqa: E402
    IMAGENET_MEAN,
    KINETICS_MEAN,
    build_model,
    get_spec,
    model_names,
    normalize,
)

NAMES = ("videomae-b", "timesformer-b", "swin3d-b", "hiera-b")


def _needs(name):
    if name == "hiera-b":
        pytest.importorskip("hiera", reason="hiera-transformer is not installed")


def test_the_registry_names_the_four_models_and_refuses_others():
    assert tuple(model_names()) == NAMES
    with pytest.raises(ValueError) as e:
        get_spec("resnet")
    assert all(n in str(e.value) for n in NAMES)


def test_each_model_has_its_own_normalization_and_default_clip():
    assert get_spec("videomae-b").mean == IMAGENET_MEAN
    assert get_spec("swin3d-b").mean == IMAGENET_MEAN
    assert get_spec("timesformer-b").mean == KINETICS_MEAN
    assert get_spec("hiera-b").std == (0.225, 0.225, 0.225)
    for n in NAMES:
        s = get_spec(n)
        assert (s.frames, s.size) == (16, 224)
    assert get_spec("timesformer-b").lora_targets == ("qkv",)
    assert get_spec("videomae-b").lora_targets == ("query", "value")


def test_normalize_uint8_and_float_agree():
    spec = get_spec("videomae-b")
    x = torch.randint(0, 256, (2, 3, 3, 4, 4), dtype=torch.uint8)
    a = normalize(x, spec)
    b = normalize(x.float() / 255.0, spec)
    assert torch.allclose(a, b, atol=1e-6)
    expect = (x[0, 0, 1].float() / 255 - spec.mean[1]) / spec.std[1]
    assert torch.allclose(a[0, 0, 1], expect, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_tiny_model_takes_b_t_c_h_w_and_returns_logits(name):
    _needs(name)
    m = build_model(name, 7, tiny=True)
    assert m.init["source"] == "random" and m.init["weights"] is None
    x = torch.randn(2, m.frames, 3, m.size, m.size)
    y = m(x)
    assert y.shape == (2, 7)
    m.eval()
    with torch.no_grad():
        y_eval = m(x)
    # Logits in eval mode too (Hiera's own head would softmax there).
    assert not torch.allclose(y_eval.sum(-1), torch.ones(2))
    assert m.head.out_features == 7
    assert len(m.blocks()) >= 2
    with pytest.raises(ValueError, match=r"\(B, T, C, H, W\)"):
        m(x[0])


def test_timesformer_is_fed_more_frames_than_it_has_time_embeddings():
    m = build_model("timesformer-b", 3, tiny=True, frames=6)
    native = m.net.timesformer.embeddings.time_embeddings.shape[1]
    assert native < m.frames
    assert m(torch.randn(1, 6, 3, m.size, m.size)).shape == (1, 3)


def test_swin3d_patch_equals_torchvision_and_calls_the_modules():
    from torchvision.models.video.swin_transformer import ShiftedWindowAttention3d

    m = build_model("swin3d-b", 4, tiny=True).eval()
    x = torch.randn(1, 4, 3, 32, 32)
    with torch.no_grad():
        patched = m(x)
        attns = [a for a in m.modules() if isinstance(a, ShiftedWindowAttention3d)]
        assert attns and all("forward" in a.__dict__ for a in attns)
        for a in attns:
            del a.forward  # back to torchvision's own forward
        original = m(x)
    assert torch.allclose(patched, original, atol=1e-5)
    # The patched forward calls qkv as a module: a hook on it sees every call.
    m2 = build_model("swin3d-b", 4, tiny=True)
    calls = []
    m2.net.features[0][0].attn.qkv.register_forward_hook(lambda *a: calls.append(1))
    m2(x)
    assert calls


def test_local_weights_load_and_a_different_head_is_reinitialized(tmp_path):
    from jouleprof.workloads.video.families import _load_into

    src = build_model("swin3d-b", 5, tiny=True)
    path = tmp_path / "swin.pth"
    torch.save({"state_dict": src.net.state_dict()}, path)
    dst = build_model("swin3d-b", 9, tiny=True)
    note = _load_into(dst.net, path)
    assert "re-initialized 2" in note  # head weight and bias
    a, b = src.net.state_dict(), dst.net.state_dict()
    assert torch.equal(a["patch_embed.proj.weight"], b["patch_embed.proj.weight"])
    assert b["head.weight"].shape[0] == 9


def test_hugging_face_weights_from_a_local_folder(tmp_path):
    src = build_model("videomae-b", 4, tiny=True)
    src.net.save_pretrained(tmp_path / "vmae")
    m = build_model("videomae-b", 6, weights=str(tmp_path / "vmae"), frames=4, size=32)
    assert m.init["source"] == "local" and m.init["weights"].endswith("vmae")
    emb_a = src.net.videomae.embeddings.patch_embeddings.projection.weight
    emb_b = m.net.videomae.embeddings.patch_embeddings.projection.weight
    assert torch.equal(emb_a, emb_b)
    assert m.head.out_features == 6
    with pytest.raises(ValueError, match="tiny"):
        build_model("videomae-b", 6, weights=str(tmp_path / "vmae"), tiny=True)


def test_checkpointing_gives_the_same_loss_and_gradients():
    torch.manual_seed(0)
    m = (
        build_model("hiera-b", 3, tiny=True)
        if _has_hiera()
        else build_model("videomae-b", 3, tiny=True)
    )
    x = torch.randn(2, m.frames, 3, m.size, m.size)
    m(x).sum().backward()
    g0 = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    m.zero_grad()
    m.set_checkpointing(True)
    assert m.checkpointing
    m(x).sum().backward()
    g1 = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    assert len(g0) == len(g1) and all(
        torch.allclose(a, b, atol=1e-5) for a, b in zip(g0, g1, strict=True)
    )
    m.set_checkpointing(False)
    assert all("_jp_forward" not in b.__dict__ for b in m.blocks())


def _has_hiera():
    try:
        import hiera  # noqa: F401
    except ImportError:
        return False
    return True


def test_videomae_position_table_is_transformers_own_built_faster():
    from transformers.models.videomae import modeling_videomae as mv

    from jouleprof.workloads.video.families import sinusoid_table

    original = mv.get_sinusoid_encoding_table
    for n, d in ((1568, 768), (16, 32), (7, 5)):  # VideoMAE-B's 16 × 224² table, and odd sizes
        assert torch.equal(sinusoid_table(n, d), original(n, d))
    m = build_model("videomae-b", 3, tiny=True)
    emb = m.net.videomae.embeddings
    assert torch.equal(emb.position_embeddings, original(emb.num_patches, 32))
    assert mv.get_sinusoid_encoding_table is original  # restored after the build
