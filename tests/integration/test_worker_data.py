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


def test_missing_dataset_without_download_fails_clearly(tmp_path):
    from worker import data

    with pytest.raises(Exception) as info:
        data.load("mnist", data_dir=str(tmp_path), download=False)
    assert "mnist" in str(info.value)
