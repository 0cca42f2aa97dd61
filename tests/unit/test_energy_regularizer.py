"""EnergyRegularizer: gradients against finite differences, exact nonzero-MAC counts, the λ
schedule, and refusals of bad input."""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from jouleprof.energy_aware import EnergyRegularizer, LambdaSchedule  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.Tanh(), nn.Linear(6, 3))


def _cnn(groups=1, stride=1, padding=1, dilation=1):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.Tanh(),
        nn.Conv2d(4, 6, 3, stride=stride, padding=padding, dilation=dilation, groups=groups),
        nn.Tanh(),
        nn.Flatten(),
        nn.LazyLinear(3),
    )


@pytest.mark.parametrize("kind", ["l1", "l2", "nonzero-macs"])
@pytest.mark.parametrize("make,shape", [(_mlp, (4, 5)), (_cnn, (3, 2, 6, 6))])
def test_penalty_gradient_matches_finite_differences(kind, make, shape):
    model = make().double()
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    model(x)  # materialize lazy layers
    reg = EnergyRegularizer(model, kind=kind, schedule=0.37)

    def penalty() -> torch.Tensor:
        reg.reset()
        model(x)
        return reg.penalty()

    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(penalty(), params, allow_unused=True)
    # the last layer's parameters do not reach E (its input is hooked, not its output): zero
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
    eps = 1e-6
    checked = 0
    gen = torch.Generator().manual_seed(2)
    for p, g in zip(params, grads, strict=True):
        flat = p.data.view(-1)
        for i in torch.randint(0, flat.numel(), (4,), generator=gen).tolist():
            old = flat[i].item()
            flat[i] = old + eps
            up = penalty().item()
            flat[i] = old - eps
            down = penalty().item()
            flat[i] = old
            fd = (up - down) / (2 * eps)
            assert g.view(-1)[i].item() == pytest.approx(fd, rel=1e-4, abs=1e-7)
            checked += 1
    assert checked >= 8
    assert any(g.abs().sum() > 0 for g in grads)


def test_l1_and_l2_equal_hand_computed_sums():
    model = _mlp().double()
    x = torch.randn(3, 5, dtype=torch.float64)
    reg = EnergyRegularizer(model, kind="l1")
    with torch.no_grad():
        h1 = torch.tanh(model[0](x))
        h2 = torch.tanh(model[2](h1))
    reg.reset()  # calling model[2] above ran its hook too
    model(x)
    want = (h1.abs().sum(1) + h2.abs().sum(1)).mean().item()
    assert reg.reported_energy() == pytest.approx(want)
    assert reg.energy().item() == pytest.approx(want)
    reg.detach()
    reg2 = EnergyRegularizer(model, kind="l2")
    model(x)
    assert reg2.reported_energy() == pytest.approx(
        (h1.pow(2).sum(1) + h2.pow(2).sum(1)).mean().item()
    )


def _brute_conv_macs(conv, x):
    """MACs with a nonzero input, counted tap by tap through unfold."""
    k = conv.kernel_size
    cols = F.unfold(x, k, conv.dilation, conv.padding, conv.stride)  # (B, C*kh*kw, L)
    b, g = x.shape[0], conv.groups
    cols = cols.reshape(b, g, -1, cols.shape[-1])
    return ((cols != 0).sum(dim=(2, 3)) * (conv.out_channels // g)).sum(1).double()


@pytest.mark.parametrize(
    "groups,stride,padding,dilation", [(1, 1, 1, 1), (2, 2, 0, 1), (1, 2, 1, 2), (2, 1, 2, 2)]
)
def test_nonzero_macs_are_exact_for_convolutions(groups, stride, padding, dilation):
    torch.manual_seed(3)
    conv = nn.Conv2d(4, 6, 3, stride=stride, padding=padding, dilation=dilation, groups=groups)
    model = nn.Sequential(nn.Conv2d(1, 4, 1), nn.ReLU(), conv)
    x = torch.randn(2, 1, 7, 7)
    reg = EnergyRegularizer(model, kind="nonzero-macs")
    model(x)
    with torch.no_grad():
        a = torch.relu(model[0](x))
    assert (a == 0).any() and (a != 0).any()
    assert reg.reported_energy() == pytest.approx(_brute_conv_macs(conv, a).mean().item())
    # the surrogate weights each |a| by the MACs it takes part in: where every nonzero is 1,
    # surrogate and count agree
    ones = (a != 0).float()
    reg.reset()
    model[2](ones)
    assert reg.energy().item() == pytest.approx(_brute_conv_macs(conv, ones).mean().item())


def test_nonzero_macs_of_linear_layers_count_nonzero_inputs_times_outputs():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5))
    x = torch.randn(6, 4)
    reg = EnergyRegularizer(model, kind="nonzero-macs")
    model(x)
    a = torch.relu(model[0](x))
    assert reg.reported_energy() == pytest.approx(((a != 0).sum(1) * 5).float().mean().item())
    assert reg.unit == "MAC"


def test_lambda_zero_builds_the_penalty_and_schedule_warms_up():
    model = _mlp()
    reg = EnergyRegularizer(model, schedule=LambdaSchedule(0.0))
    model(torch.randn(2, 5))
    p = reg.penalty()
    assert p.item() == 0 and p.requires_grad  # same graph as any λ: identical work
    s = LambdaSchedule(1e-2, "linear-warmup", warmup_steps=4)
    assert [s.value(i) for i in range(6)] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])
    reg = EnergyRegularizer(model, schedule=s)
    assert reg.lam == pytest.approx(2.5e-3)
    reg.advance()
    reg.advance()
    assert reg.lam == pytest.approx(7.5e-3)


def test_default_layers_skip_the_first_and_detach_removes_hooks():
    model = _mlp()
    reg = EnergyRegularizer(model)
    assert reg.layers == ("2", "4")
    reg.detach()
    reg.reset()
    model(torch.randn(2, 5))
    with pytest.raises(RuntimeError, match="collected nothing"):
        reg.energy()


def test_sparsity_counts_exact_zeros():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    reg = EnergyRegularizer(model)
    x = torch.randn(10, 3)
    model(x)
    a = torch.relu(model[0](x))
    assert reg.take_sparsity() == pytest.approx((a == 0).float().mean().item())
    assert reg.take_sparsity() is None


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"kind": "l0"}, "l1, l2, nonzero-macs"),
        ({"layers": ["nope"]}, "not modules of the model; weight layers are: 0, 2, 4"),
        ({"layers": ["1"]}, "not nn.Linear"),
        ({"schedule": -1e-3}, "≥ 0"),
    ],
)
def test_bad_input_is_refused_with_the_choices(kw, match):
    with pytest.raises(ValueError, match=match):
        EnergyRegularizer(_mlp(), **kw)


def test_schedule_refuses_bad_fields():
    with pytest.raises(ValueError, match="constant"):
        LambdaSchedule(1.0, kind="cosine")
    with pytest.raises(ValueError, match="warmup_steps"):
        LambdaSchedule(1.0, kind="linear-warmup")
    with pytest.raises(ValueError, match="finite"):
        LambdaSchedule(float("nan"))


def test_mean_reduction_divides_by_the_dense_value():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 3))
    x = torch.randn(6, 4)
    s = EnergyRegularizer(model, kind="l1")
    m = EnergyRegularizer(model, kind="l1", reduction="mean")
    model(x)
    assert m.reported_energy() == pytest.approx(s.reported_energy() / (8 + 5))
    s.detach(), m.detach()
    nz = EnergyRegularizer(model, kind="nonzero-macs", reduction="mean")
    with torch.no_grad():
        a1 = torch.relu(model[0](x))
        a2 = torch.relu(model[2](a1))
    nz.reset()  # calling model[2] above ran its hook
    model(x)
    want = (((a1 != 0).sum(1) * 5 + (a2 != 0).sum(1) * 3).float().mean() / (8 * 5 + 5 * 3)).item()
    assert nz.reported_energy() == pytest.approx(want)
    assert 0 < want < 1 and nz.unit == "fraction of dense MACs"
    with pytest.raises(ValueError, match="sum, mean"):
        EnergyRegularizer(model, reduction="max")


def test_mean_reduction_gradient_matches_finite_differences():
    model = _cnn().double()
    x = torch.randn(2, 2, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    model(x)
    reg = EnergyRegularizer(model, kind="nonzero-macs", schedule=2.0, reduction="mean")

    def penalty():
        reg.reset()
        model(x)
        return reg.penalty()

    w = model[0].weight
    (g,) = torch.autograd.grad(penalty(), [w])
    eps, flat = 1e-6, w.data.view(-1)
    for i in (0, 7, 20):
        old = flat[i].item()
        flat[i] = old + eps
        up = penalty().item()
        flat[i] = old - eps
        down = penalty().item()
        flat[i] = old
        assert g.view(-1)[i].item() == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-9)
