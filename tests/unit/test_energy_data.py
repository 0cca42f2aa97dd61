"""The energy-aware datasets and models: shipped and generated data, local IDX / CIFAR-10
folders (and what a wrong folder says), every architecture on every shape, and the cell spec's
refusals."""

import gzip
import pickle

import numpy as np
import pytest

from jouleprof.workloads.energy_aware.datasets import (
    DatasetError,
    load_dataset,
    read_idx,
)
from jouleprof.workloads.energy_aware.models import ARCHS, arch_config, vit_patch


def _write_idx(path, arr, gz=False):
    arr = np.asarray(arr, np.uint8)
    head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    data = head + arr.tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def test_builtin_datasets_are_split_scaled_and_deterministic():
    d = load_dataset("digits")
    assert d.in_shape == (1, 8, 8) and d.n_classes == 10
    assert len(d.x_train) + len(d.x_test) == 1797
    assert d.x_train.min() >= 0 and d.x_train.max() <= 1
    for name, classes in (("synthetic", 10), ("shapes", 8)):
        a = load_dataset(name, n=120, side=12)
        b = load_dataset(name, n=120, side=12)
        assert a.in_shape == (1, 12, 12) and a.n_classes == classes
        assert len(a.x_train) == 96 and len(a.x_test) == 24
        np.testing.assert_array_equal(a.x_train, b.x_train)
        assert set(np.unique(a.y_train)) <= set(range(classes))


@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder_is_read(tmp_path, gz):
    rng = np.random.default_rng(0)
    sfx = ".gz" if gz else ""
    _write_idx(tmp_path / f"train-images-idx3-ubyte{sfx}", rng.integers(0, 256, (20, 28, 28)), gz)
    _write_idx(tmp_path / f"train-labels-idx1-ubyte{sfx}", rng.integers(0, 10, 20), gz)
    _write_idx(tmp_path / f"t10k-images-idx3-ubyte{sfx}", rng.integers(0, 256, (5, 28, 28)), gz)
    _write_idx(tmp_path / f"t10k-labels-idx1-ubyte{sfx}", np.arange(5), gz)
    d = load_dataset("fashion-mnist", tmp_path)
    assert d.in_shape == (1, 28, 28) and len(d.x_train) == 20 and len(d.x_test) == 5
    assert d.x_train.max() <= 1.0
    np.testing.assert_array_equal(d.y_test, np.arange(5))


def test_a_wrong_folder_says_what_it_holds(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    _write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((2, 4, 4)))
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", tmp_path)
    msg = str(e.value)
    assert "lacks train-labels-idx1-ubyte" in msg and "t10k-images-idx3-ubyte" in msg
    assert "it holds: notes.txt, train-images-idx3-ubyte" in msg
    with pytest.raises(DatasetError, match="lacks data_batch_1.*it holds: notes.txt"):
        load_dataset("cifar10", tmp_path)
    with pytest.raises(DatasetError, match="give its path"):
        load_dataset("mnist")
    bad = tmp_path / "bad-idx"
    bad.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(DatasetError, match="magic"):
        read_idx(bad)


def test_cifar10_batches_are_read(tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), b"labels": [0, 1, 9]}
        with (base / name).open("wb") as f:
            pickle.dump(batch, f)
    d = load_dataset("cifar10", tmp_path)
    assert d.in_shape == (3, 32, 32) and len(d.x_train) == 15 and len(d.x_test) == 3


def test_unknown_dataset_lists_the_choices():
    with pytest.raises(DatasetError, match="digits, synthetic, shapes, mnist"):
        load_dataset("imagenet")


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 12, 12)])
def test_every_architecture_builds_for_every_shape(arch, shape):
    torch = pytest.importorskip("torch")
    from jouleprof.workloads.energy_aware.models import build_model

    small = {"width": 8 if not arch.startswith("vit") else 16, "depth": 2, "heads": 2}
    model = build_model(arch_config(arch, **small), shape, 5)
    assert model(torch.rand(2, *shape)).shape == (2, 5)


def test_vit_patch_keeps_tokens_at_most_64():
    assert [vit_patch(s) for s in (8, 16, 28, 32)] == [1, 2, 4, 4]


def test_arch_and_cell_refusals_name_the_choices():
    from jouleprof.workloads.energy_aware.cell import CellSpec

    with pytest.raises(ValueError, match="mlp, mlp-large, cnn"):
        arch_config("resnet")
    with pytest.raises(ValueError, match="valid are width"):
        arch_config("mlp", colour=3)
    with pytest.raises(ValueError, match="heads"):
        arch_config("vit-tiny", heads=3)
    with pytest.raises(ValueError, match="≥ 0"):
        CellSpec(lam=-1e-3)
    with pytest.raises(ValueError, match="choose one of digits"):
        CellSpec(dataset="svhn")
