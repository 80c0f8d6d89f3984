"""What only Keras 3 has: the names of Keras 3.15's API that tf_keras 2.21 (what a task's ``import
keras`` is under multi_worker_mirrored and parameter_server, launcher/contract/kerasalias.py) lacks,
each with the tf_keras or TensorFlow spelling of the same thing where there is one. Data, read by
launcher/loader/scriptread.py; tests/unit/loader/test_keras3_table.py checks it against the installed
keras and tf_keras (``dir()`` of each module, when both are installed).

The rest of Keras 3's API maps: ``keras.layers.Dense``, ``keras.Sequential``, ``keras.Model``,
``model.compile``/``fit``/``evaluate``/``save``, the losses, metrics, optimizers and callbacks both
have, ``keras.utils.set_random_seed`` ... are tf_keras's own under the same names.
"""

from __future__ import annotations

# The top-level names, each with its fix ("" where tf_keras has nothing like it).
TOP: dict[str, str] = {
    "ops": "TensorFlow's ops in its place (keras.ops.mean -> tf.reduce_mean, keras.ops.matmul -> tf.linalg.matmul)",
    "random": "tf.random in its place (keras.random.normal -> tf.random.normal)",
    "config": "keras.backend in its place (keras.config.floatx -> keras.backend.floatx); a backend other than "
              "TensorFlow has no place under a tf.distribute strategy",
    "tree": "tf.nest in its place (keras.tree.map_structure -> tf.nest.map_structure)",
    "Layer": "keras.layers.Layer", "Loss": "keras.losses.Loss", "Metric": "keras.metrics.Metric",
    "Optimizer": "keras.optimizers.Optimizer", "Initializer": "keras.initializers.Initializer",
    "Regularizer": "keras.regularizers.Regularizer", "InputSpec": "keras.layers.InputSpec",
    "Variable": "tf.Variable", "name_scope": "tf.name_scope", "device": "tf.device",
    "version": "keras.__version__", "DTypePolicy": "keras.mixed_precision.Policy",
    "FloatDTypePolicy": "keras.mixed_precision.Policy",
    "Function": "", "KerasTensor": "", "Operation": "", "Quantizer": "", "RematScope": "", "StatelessScope": "",
    "SymbolicScope": "", "distillation": "", "distribution": "", "dtype_policies": "keras.mixed_precision",
    "legacy": "", "quantizers": "", "remat": "", "visualization": "", "wrappers": "",
}

# Names in a submodule: "submodule.name" -> fix.
NESTED: dict[str, str] = {
    **{f"layers.{n}": "" for n in (
        "AdaptiveAveragePooling1D", "AdaptiveAveragePooling2D", "AdaptiveAveragePooling3D", "AdaptiveMaxPooling1D",
        "AdaptiveMaxPooling2D", "AdaptiveMaxPooling3D", "AugMix", "AutoContrast",
        "ContrastLimitedAdaptiveHistogramEqualization", "CutMix", "Equalization", "FlaxLayer",
        "GroupQueryAttention", "JaxLayer", "MaxNumBoundingBoxes", "MelSpectrogram", "MixUp", "Pipeline",
        "RMSNormalization", "RandAugment", "RandomColorDegeneration", "RandomColorJitter",
        "RandomElasticTransform", "RandomErasing", "RandomGaussianBlur", "RandomGrayscale", "RandomHue",
        "RandomInvert", "RandomPerspective", "RandomPosterization", "RandomSaturation", "RandomSharpness",
        "RandomShear", "ReversibleEmbedding", "STFTSpectrogram", "Solarization", "TFSMLayer",
        "TorchModuleWrapper")},
    "utils.PyDataset": "keras.utils.Sequence (or a tf.data.Dataset)",
    "utils.clear_session": "keras.backend.clear_session", "utils.Config": "", "utils.bounding_boxes": "",
    "utils.is_keras_tensor": "", "utils.standardize_dtype": "",
    "backend.is_float_dtype": "", "backend.is_int_dtype": "", "backend.result_type": "",
    "backend.standardize_dtype": "",
    "saving.CustomObjectScope": "keras.utils.CustomObjectScope", "saving.KerasFileEditor": "",
    "saving.load_weights": "model.load_weights", "saving.save_weights": "model.save_weights",
    "optimizers.LossScaleOptimizer": "keras.mixed_precision.LossScaleOptimizer", "optimizers.Lamb": "",
    "optimizers.MultiOptimizer": "", "optimizers.Muon": "", "optimizers.OptimizerMap": "",
    "optimizers.ScheduleFreeAdamW": "",
    "callbacks.OrbaxCheckpoint": "keras.callbacks.ModelCheckpoint", "callbacks.SwapEMAWeights": "",
    **{f"losses.{n}": "" for n in ("CTC", "CategoricalGeneralizedCrossEntropy", "Circle", "Dice", "Tversky",
                                   "categorical_generalized_cross_entropy", "circle", "ctc", "dice", "tversky")},
    **{f"metrics.{n}": "" for n in ("ConcordanceCorrelation", "PearsonCorrelation", "categorical_hinge",
                                    "concordance_correlation", "huber", "pearson_correlation")},
    **{f"initializers.{n}": "" for n in ("IdentityInitializer", "OrthogonalInitializer", "STFT", "STFTInitializer",
                                         "stft")},
    **{f"activations.{n}": "tf.nn in its place" for n in (
        "celu", "glu", "hard_shrink", "hard_silu", "hard_swish", "hard_tanh", "leaky_relu", "log_sigmoid",
        "log_softmax", "relu6", "silu", "soft_shrink", "sparse_plus", "sparse_sigmoid", "sparsemax", "squareplus",
        "tanh_shrink", "threshold")},
    "mixed_precision.DTypePolicy": "keras.mixed_precision.Policy", "mixed_precision.dtype_policy":
        "keras.mixed_precision.global_policy", "mixed_precision.set_dtype_policy": "keras.mixed_precision.set_global_policy",
    "datasets.california_housing": "",
}

# Packages built on Keras 3 alone: importing them under tf_keras fails.
PACKAGES: tuple[str, ...] = ("keras_hub", "keras_nlp", "keras_cv", "keras_rs")


def fix_of(name: str) -> str:
    """The fix for ``keras.<name>`` (a dotted name under keras), or "" where there is none."""
    if name in NESTED:
        return NESTED[name]
    return TOP.get(name.split(".", 1)[0], "")


def only_keras3(name: str) -> bool:
    """Whether ``keras.<name>`` (dotted) is Keras 3's alone."""
    parts = name.split(".")
    return parts[0] in TOP or ".".join(parts[:2]) in NESTED
