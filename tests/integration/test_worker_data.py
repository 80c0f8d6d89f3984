"""The worker's TFDS input: the real ``tfds.load`` path, tested offline."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.tf]


def test_mnist_goes_through_tfds_load_with_mock_data(tmp_path):
    import tensorflow_datasets as tfds

    from worker import data

    with tfds.testing.mock_data(num_examples=40, data_dir=None):
        d = data.load("mnist", data_dir=str(tmp_path), download=False)
        assert (d.shape, d.num_classes) == ((28, 28, 1), 10)
        images = [x.numpy() for x, _ in d.train.take(5)]
    assert all(img.dtype.name == "float32" and 0.0 <= img.min() and img.max() <= 1.0 for img in images)


def test_offline_digits_dataset_builds_once_and_loads(tmp_path):
    from worker import data

    first = data.load("digits", data_dir=str(tmp_path))
    assert (first.num_train, first.num_test, first.shape, first.num_classes) == (1437, 360, (8, 8, 1), 10)
    assert (tmp_path / "tfcluster_digits" / "1.0.0" / "dataset_info.json").is_file()
    labels = sorted({int(y) for _, y in first.test})
    assert labels == list(range(10))
    again = data.load("digits", data_dir=str(tmp_path), download=False)  # no rebuild needed
    assert again.num_train == 1437


def test_the_digits_are_the_uci_test_set_this_package_ships_not_scikit_learns(tmp_path, monkeypatch):
    """The default dataset's rows come from worker/digits.csv.gz (scikit-learn's copy of the UCI
    optdigits test set, byte for byte): no scikit-learn import, which ``import tensorflow`` would
    otherwise pay in every task process where scikit-learn is installed."""
    import hashlib
    import sys

    from worker import data

    assert hashlib.sha256(data.DIGITS_FILE.read_bytes()).hexdigest() == (
        "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22")
    assert "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22" in (
        data.DIGITS_FILE.with_name("DIGITS-LICENSE.md").read_text())
    import numpy as np

    images, labels = data.read_digits()
    assert images.shape == (1797, 8, 8) and labels.dtype.name == "int64"
    assert (images.min(), images.max(), images.sum()) == (0.0, 16.0, 561718.0)
    assert [int(n) for n in np.bincount(labels)] == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    monkeypatch.setitem(sys.modules, "sklearn", None)  # (an import of it would now raise)
    built = data.load("digits", data_dir=str(tmp_path))
    got = sorted(int(x.numpy().sum() * 255 + 0.5) for x, _ in built.train.concatenate(built.test))
    assert got == sorted(np.clip(images * 16, 0, 255).sum(axis=(1, 2)).astype(int).tolist())  # each image, as before


def test_missing_dataset_without_download_fails_clearly(tmp_path):
    from worker import data

    with pytest.raises(Exception) as info:
        data.load("mnist", data_dir=str(tmp_path), download=False)
    assert "mnist" in str(info.value)


def test_the_training_and_test_pipelines_run_without_tf_datas_autotuning_thread(tmp_path):
    """An iterator's destructor waits for tf.data's autotuning thread to end a sleep that doubles
    with the iterator's age, and ``fit`` destroys its training iterator as it returns: the end of
    a long run waited for it (17-19 s after 30 epochs of 4 MWMS workers; py-spy: the main thread
    in ``~RootDataset::Iterator`` / ``~LogicalThreadWrapper`` under ``run_fit``; bench/fit_end.py)."""
    import argparse

    from worker.data import training_pipelines

    args = argparse.Namespace(dataset="digits", data_dir=str(tmp_path), no_download=False, shard_policy="data",
                              seed=1, steps_per_epoch=0)
    pipes = training_pipelines(args, global_batch=64)
    assert [ds.options().autotune.enabled for ds in (pipes.train, pipes.test)] == [False, False]
    assert next(iter(pipes.train))[0].shape[0] == 64  # (still a pipeline that yields batches)
