"""Methods and precisions of the video classifiers, for every model × method (tiny configs):
every trainable parameter receives a gradient, the trainable set is the method's, the adapters
change the output; refused pairs and unknown names are said; the trainer learns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from jouleprof.workloads.video.adapt import (  # noqa: E402
    METHODS,
    adapt,
    after_step,
    extra_loss,
    parameter_counts,
)
from jouleprof.workloads.video.models import build_model  # noqa: E402
from jouleprof.workloads.video.precision import (  # noqa: E402
    PRECISIONS,
    check_pair,
    get_precision,
    grad_scaler,
    quant_available,
    refusal,
)

NAMES = ("videomae-b", "timesformer-b", "swin3d-b", "hiera-b")


def _build(name):
    if name == "hiera-b":
        pytest.importorskip("hiera", reason="hiera-transformer is not installed")
    torch.manual_seed(0)
    return build_model(name, 5, tiny=True)


def _precision_for(method):
    # QLoRA's base is 4-bit at any compute precision; the others are checked in fp32 here
    # (their int8 base below).
    return "fp32"


def _check(model, vc, method):
    x = torch.randn(2, vc.frames, 3, vc.size, vc.size)
    loss = model(x).float().logsumexp(-1).mean()
    reg = extra_loss(model)
    if reg is not None:
        loss = loss + reg
    loss.backward()
    named = dict(model.named_parameters())
    trainable = {n for n, p in named.items() if p.requires_grad}
    assert trainable, "nothing trains"
    no_grad = sorted(n for n in trainable if named[n].grad is None)
    assert not no_grad, f"trainable parameters without a gradient: {no_grad[:5]}"
    frozen_with_grad = sorted(
        n for n, p in named.items() if not p.requires_grad and p.grad is not None
    )
    assert not frozen_with_grad
    head = f".{vc.head_name}."
    assert any(head in n or n.startswith(f"net.{vc.head_name}.") for n in trainable), "head frozen"
    if method == "full":
        assert trainable == set(named)
    elif method == "bitfit":
        expect = {n for n in named if n.endswith("bias") or f"net.{vc.head_name}." in n}
        assert trainable == expect
    else:
        adapters = {n for n in trainable if "lora_" in n}
        assert adapters, "no adapter parameters"
        assert trainable - adapters == {n for n in trainable if f"net.{vc.head_name}." in n}
        # The adapters reach the output: lora_B (LoRA) or lora_E (AdaLoRA) moves the loss.
        moving = [n for n in adapters if ("lora_B" in n or "lora_E" in n)]
        assert any(named[n].grad.abs().sum() > 0 for n in moving), "adapters bypassed"
    c = parameter_counts(model)
    assert c["trainable"] == sum(named[n].numel() for n in trainable)
    assert (c["trainable"] == c["total"]) == (method == "full")
    return named


@pytest.mark.parametrize("method", ["full", "lora", "adalora", "bitfit"])
@pytest.mark.parametrize("name", NAMES)
def test_every_trainable_parameter_gets_a_gradient(name, method):
    vc = _build(name)
    model = adapt(vc, method, "fp32")
    _check(model, vc, method)
    if method == "adalora":
        assert extra_loss(model) is not None
        after_step(model, 1)  # rank allocation runs on the gradients


def _quant_or_skip():
    ok, why = quant_available()
    if not ok:
        pytest.skip(why)


@pytest.mark.parametrize("name", NAMES)
def test_qlora_trains_adapters_on_a_4bit_base(name):
    _quant_or_skip()
    import bitsandbytes as bnb

    vc = _build(name)
    model = adapt(vc, "qlora", "bf16")
    assert vc.quant["bits"] == 4 and vc.quant["layers"] > 0
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in vc.modules())
    assert not isinstance(vc.head, bnb.nn.Linear4bit)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _check(model, vc, "qlora")


@pytest.mark.parametrize("method", ["lora", "adalora", "bitfit"])
@pytest.mark.parametrize("name", NAMES)
def test_int8_base_trains_the_method_parameters(name, method, monkeypatch):
    _quant_or_skip()
    import bitsandbytes as bnb

    # On the CPU bitsandbytes multiplies an 8-bit layer's input of any rank (it dequantizes);
    # the CUDA int8 kernel refuses more than three dimensions, and Swin3D's MLPs pass five.
    # The CPU check holds the CUDA kernel's rule.
    any_rank = bnb.matmul

    def cuda_rule(A, B, *args, **kwargs):
        if A.dim() not in (2, 3):
            raise ValueError("Only two or three dimensional matrices are supported for argument A")
        return any_rank(A, B, *args, **kwargs)

    monkeypatch.setattr(bnb, "matmul", cuda_rule)

    vc = _build(name)
    model = adapt(vc, method, "int8")
    assert vc.quant["bits"] == 8
    assert any(isinstance(m, bnb.nn.Linear8bitLt) for m in vc.modules())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _check(model, vc, method)


def test_refused_pairs_say_why_and_names_list_the_choices():
    assert refusal("full", "int8") and refusal("qlora", "int8")
    assert [p for p in PRECISIONS if refusal("lora", p)] == []
    with pytest.raises(ValueError, match="not supported: full fine-tuning"):
        check_pair("full", "int8")
    with pytest.raises(ValueError) as e:
        check_pair("prefix", "bf16")
    assert all(m in str(e.value) for m in METHODS)
    with pytest.raises(ValueError) as e:
        get_precision("fp8")
    assert all(p in str(e.value) for p in PRECISIONS)
    vc = _build("swin3d-b")
    with pytest.raises(ValueError, match="not supported"):
        adapt(vc, "full", "int8")


def test_precisions_autocast_and_loss_scaling():
    assert get_precision("fp16").loss_scaling and grad_scaler("fp16", "cpu") is not None
    assert grad_scaler("bf16", "cpu") is None and grad_scaler("fp32", "cpu") is None
    assert get_precision("bf16").autocast_dtype == "bfloat16"
    assert get_precision("fp32").autocast_dtype is None
    assert get_precision("int8").base_bits == 8


def test_the_trainer_learns_a_fixed_batch():
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    cfg = TrainerConfig(
        model="timesformer-b",
        method="full",
        precision="fp32",
        tiny=True,
        batch_size=3,
        num_classes=3,
        lr=3e-3,
        weight_decay=0.0,
        frames=2,
    )
    t = VideoTrainer(cfg, "cpu")
    f, s = cfg.clip
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, f, 3, s, s, generator=g), torch.tensor([0, 1, 2])
    losses = [float(t.train_step(x, y)) for _ in range(6)]
    assert losses[-1] < 0.7 * losses[0], losses
    assert t.global_step == 6
    assert t.eval_logits(x).shape == (3, 3)
    assert t.facts()["parameters"]["trainable"] == t.facts()["parameters"]["total"]


def test_fp16_steps_scale_the_loss_and_keep_fp32_master_weights():
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    cfg = TrainerConfig(
        model="timesformer-b", method="lora", precision="fp16", tiny=True, batch_size=2, frames=2
    )
    t = VideoTrainer(cfg, "cpu")
    f, s = cfg.clip
    x, y = torch.randn(2, f, 3, s, s), torch.tensor([0, 1])
    t.train_step(x, y)
    assert t.scaler is not None and t.scaler.get_scale() > 0
    assert all(p.dtype == torch.float32 for p in t.model.parameters() if p.requires_grad)


def test_trainer_config_refuses_bad_input():
    from jouleprof.workloads.video.step import TrainerConfig

    with pytest.raises(ValueError, match="not supported"):
        TrainerConfig(method="qlora", precision="int8")
    with pytest.raises(ValueError, match="unknown video model"):
        TrainerConfig(model="x3d")
    with pytest.raises(ValueError, match="optimizer_impl"):
        TrainerConfig(optimizer_impl="sgd")


def test_bitfit_layer_norms_keep_their_output_and_train_the_bias_alone():
    # The affine is applied outside the fused LayerNorm kernel (its CUDA backward dropped the
    # bias gradient when the weight was frozen, on the H200): same output, bias-only gradients.
    vc = _build("swin3d-b").eval()
    x = torch.randn(2, vc.frames, 3, vc.size, vc.size)
    with torch.no_grad():
        before = vc(x)
    model = adapt(vc, "bitfit", "fp32").eval()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all("forward" in m.__dict__ for m in norms)
    with torch.no_grad():
        assert torch.allclose(model(x), before, atol=1e-5)
    model.train()
    model(x).sum().backward()
    assert all(m.bias.grad is not None and m.weight.grad is None for m in norms)


@pytest.mark.parametrize("name", ["swin3d-b", "videomae-b"])
def test_int8_bitfit_biases_keep_their_dtype_through_autocast_steps(name):
    # bitsandbytes' Linear8bitLt casts bias.data to its input's dtype in every forward: under
    # bf16 autocast a BitFit bias became bf16 after its optimizer was built, and on the H200
    # fused AdamW refused Swin3D's step. The trained parameters must keep their dtypes, and a
    # fused AdamW over them must step.
    _quant_or_skip()
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    cfg = TrainerConfig(model=name, method="bitfit", precision="int8", tiny=True, batch_size=2,
                        num_classes=3, frames=2)  # fmt: skip
    t = VideoTrainer(cfg, "cpu")
    t.optimizer = torch.optim.AdamW(t.optimizer.param_groups, fused=True)
    before = {n: p.dtype for n, p in t.model.named_parameters() if p.requires_grad}
    f, s = cfg.clip
    x, y = torch.randn(2, f, 3, s, s), torch.tensor([0, 1])
    for _ in range(2):
        assert torch.isfinite(t.train_step(x, y))
    after = {n: p.dtype for n, p in t.model.named_parameters() if p.requires_grad}
    assert after == before and set(before.values()) == {torch.float32}
