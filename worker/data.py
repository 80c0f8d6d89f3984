"""Input pipelines from tensorflow-datasets.

Users name a TFDS dataset (``mnist``, ``fashion_mnist``, ``cifar10``) and get the real
``tfds.load(name, data_dir=...)``. The default, ``digits``, works offline: a small TFDS
dataset built on first use from the 8x8 handwritten digits this package ships (digits.csv.gz:
the UCI test set scikit-learn ships too, byte for byte), then loaded through the very same
``tfds.load`` path.

The digits are a file here, not scikit-learn's ``load_digits``: where scikit-learn is installed,
``import tensorflow`` imports it (Keras 3's scikit-learn wrappers, and TensorFlow's own legacy
Keras imports scipy), and every TensorFlow process of a host pays for it: the reference worker's
imports 0.3-0.5 s and 25 MB more, a plain ``import tensorflow`` 0.5-1.0 s and 67 MB (TF 2.21, 2026-12-04;
BENCHMARKS.md, "What scikit-learn cost every task").
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

# Our offline dataset's registered TFDS name.
DIGITS = "tfcluster_digits"
ALIASES = {"digits": DIGITS}
_TEST_FRACTION = 0.2
# The UCI optdigits test set, 1797 rows of 64 pixels (0..16) and the label: scikit-learn's
# sklearn/datasets/data/digits.csv.gz, copied unchanged (sha256 09f66e6d...; DIGITS-LICENSE.md).
DIGITS_FILE = Path(__file__).with_name("digits.csv.gz")


class TfclusterDigits(tfds.core.GeneratorBasedBuilder):
    """The UCI 8x8 handwritten digits (1797 images, 10 classes) as a TFDS dataset."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(8, 8, 1)),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            ),
            supervised_keys=("image", "label"),
            description="Handwritten digits from scikit-learn (UCI optdigits test set), 8x8 grey.",  # (as built before: unchanged in a data_dir)
        )

    def _split_generators(self, dl_manager):
        pixels, labels = read_digits()
        # Pixel values are 0..16; scale to 0..255 so every dataset normalises alike.
        images = np.clip(pixels * 16, 0, 255).astype(np.uint8)[..., None]
        order = np.random.RandomState(0).permutation(len(labels))
        cut = int(len(labels) * (1 - _TEST_FRACTION))
        train, test = order[:cut], order[cut:]
        return {
            "train": self._generate_examples(images[train], labels[train]),
            "test": self._generate_examples(images[test], labels[test]),
        }

    def _generate_examples(self, images, labels):
        for i, (image, label) in enumerate(zip(images, labels)):
            yield i, {"image": image, "label": int(label)}


def read_digits(path: Path = DIGITS_FILE) -> tuple[np.ndarray, np.ndarray]:
    """The digits file's images (N, 8, 8) float64 in 0..16 and labels (N,) int64, as
    scikit-learn's ``load_digits`` returns them (its ``images`` and ``target``)."""
    with gzip.open(path, "rt") as fh:
        rows = np.loadtxt(fh, delimiter=",")
    return rows[:, :-1].reshape(-1, 8, 8), rows[:, -1].astype(np.int64)


@dataclass(frozen=True)
class Data:
    train: tf.data.Dataset  # (image float32 [0,1], label) examples, not batched
    test: tf.data.Dataset
    num_train: int
    num_test: int
    shape: tuple
    num_classes: int


def default_data_dir() -> str:
    return os.environ.get("TFDS_DATA_DIR") or str(Path.home() / "tensorflow_datasets")


@contextlib.contextmanager
def _build_lock(data_dir: str, name: str):
    """Tasks on one host may build the same dataset at once; one builds, the rest wait."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(data_dir) / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load(name: str = "digits", data_dir: str | None = None, download: bool = True) -> Data:
    """Load train/test splits of a TFDS image classification dataset via ``tfds.load``."""
    name = ALIASES.get(name, name)
    data_dir = data_dir or default_data_dir()
    with _build_lock(data_dir, name):
        (train, test), info = tfds.load(
            name,
            split=["train", "test"],
            data_dir=data_dir,
            as_supervised=True,
            with_info=True,
            download=download,
        )
    shape = tuple(info.features["image"].shape)
    num_classes = info.features["label"].num_classes

    def normalise(image, label):
        return tf.cast(image, tf.float32) / 255.0, label

    return Data(
        train=train.map(normalise, num_parallel_calls=tf.data.AUTOTUNE),
        test=test.map(normalise, num_parallel_calls=tf.data.AUTOTUNE),
        num_train=_num_examples(info, "train", train),
        num_test=_num_examples(info, "test", test),
        shape=shape,
        num_classes=num_classes,
    )


@dataclass(frozen=True)
class Pipelines:
    """What a trainer feeds on: batched, sharded train (repeated) and test datasets."""

    data: Data
    train: tf.data.Dataset
    test: tf.data.Dataset
    steps_per_epoch: int


def training_pipelines(args, global_batch: int, drop_test_remainder: bool = False) -> Pipelines:
    """Load ``args.dataset`` and batch it by the global batch. The train split repeats, so an
    epoch is exactly ``steps_per_epoch`` steps (default: one pass), which keeps epoch and
    step numbers -- and so resume points -- identical on every worker and attempt."""
    tfds.disable_progress_bar()
    data = load(args.dataset, args.data_dir, download=not args.no_download)
    options = distribute_options(args.shard_policy)
    train = (
        data.train.cache()
        .shuffle(data.num_train, seed=args.seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    test = data.test.batch(global_batch, drop_remainder=drop_test_remainder).with_options(options)
    return Pipelines(data, train, test, steps_per_epoch(args.steps_per_epoch, data.num_train, global_batch))


def steps_per_epoch(requested: int, num_train: int, step_batch: int) -> int:
    """Steps in an epoch, the one place it is computed: ``--steps-per-epoch`` if given, else
    one pass over the training split at ``step_batch`` examples per step (the global batch;
    under PSS one worker's batch)."""
    return requested or math.ceil(num_train / step_batch)


def _num_examples(info, split: str, ds: tf.data.Dataset) -> int:
    """From the dataset's metadata; counted when there is none (e.g. under tfds mock data)."""
    try:
        return int(info.splits[split].num_examples)
    except KeyError:
        return int(ds.reduce(0, lambda n, _: n + 1))


def distribute_options(policy: str = "data") -> tf.data.Options:
    """Auto-sharding across workers. DATA by default: small TFDS datasets have fewer files
    than workers, where FILE sharding would leave workers without input."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = {
        "auto": tf.data.experimental.AutoShardPolicy.AUTO,
        "data": tf.data.experimental.AutoShardPolicy.DATA,
        "file": tf.data.experimental.AutoShardPolicy.FILE,
        "off": tf.data.experimental.AutoShardPolicy.OFF,
    }[policy]
    # No autotuning thread: an iterator's destructor waits for it to end a sleep that doubles with
    # the iterator's age, up to a minute (``~RootDataset::Iterator`` in ``~LogicalThreadWrapper``,
    # py-spy), and fit destroys its training iterator as it returns: the end of a run waited
    # 17 s after 30 epochs here, 30-48 s in a soak's longer attempts, before the final save
    # (BENCHMARKS.md, "Soak under random faults"). The pipeline is cached after its first epoch;
    # prefetch's AUTOTUNE keeps its own (legacy) buffer sizing, map's its core count.
    options.autotune.enabled = False
    return options
