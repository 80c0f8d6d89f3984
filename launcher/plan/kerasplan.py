"""What ``import keras`` and ``tf.keras`` are in a task: the spec's ``keras`` against its strategy,
pure.

Keras 3 (``tf.keras`` since TF 2.16, and ``import keras`` of ``pip install tensorflow``) cannot
train under multi_worker_mirrored or parameter_server: its ``model.fit`` fails on their
distributed datasets (``ValueError: Attempt to convert a value (PerReplica:{...})``, keras#20585,
tensorflow#72388); tf_keras can. So under those two, unless the spec says ``keras: 3``, a task gets
``TF_USE_LEGACY_KERAS=1`` (``tf.keras`` is tf_keras, as Ray Train's TensorflowTrainer does) and
TFCLUSTER_KERAS=tf_keras (its ``import keras`` is tf_keras too: launcher/contract/kerasalias.py, in
tfcluster's stub for a Python script or module). The spec's ``env`` still has the last word on
TF_USE_LEGACY_KERAS: ``0`` there under ``keras: auto`` keeps Keras 3 throughout.
"""

from __future__ import annotations

from typing import Optional

from launcher.contract import envnames
from launcher.spec.model import Spec

# The strategies Keras 3's model.fit cannot train under.
TF_KERAS_STRATEGIES = ("multi_worker_mirrored", "parameter_server")
LEGACY = "TF_USE_LEGACY_KERAS"
TF_KERAS = "tf_keras"  # TFCLUSTER_KERAS's one value


def keras_major(spec: Spec) -> Optional[int]:
    """2: tasks get tf_keras as ``keras`` and ``tf.keras``; 3: Keras 3 is kept where tfcluster would
    have given tf_keras; None: the strategy needs neither (the installed Keras, untouched)."""
    if spec.keras in (2, 3):
        return spec.keras
    if spec.strategy not in TF_KERAS_STRATEGIES:
        return None
    if spec.env.get(LEGACY, "1").strip().lower() in ("0", "false", "no", ""):
        return 3
    return 2


def keras_env(spec: Spec) -> dict[str, str]:
    """The variables every task gets for its Keras (the spec's ``env`` is applied over them)."""
    if keras_major(spec) == 2:
        return {LEGACY: "1", envnames.KERAS: TF_KERAS}
    return {}


def keras_line(spec: Spec) -> Optional[str]:
    """What ``tfcluster plan`` says of it, or None where Keras is the installed one untouched."""
    major = keras_major(spec)
    if major == 2:
        why = (f"{spec.strategy}: Keras 3 model.fit cannot train under it" if spec.strategy in TF_KERAS_STRATEGIES
               else "keras: 2")
        return (f"keras: `import keras` and tf.keras are tf_keras in a Python script's tasks ({why}); "
                "a script that uses what only Keras 3 has is refused; `keras: 3` keeps Keras 3")
    if major == 3 and spec.strategy in TF_KERAS_STRATEGIES:
        return (f"keras: Keras 3 kept (keras: 3 or env TF_USE_LEGACY_KERAS); its model.fit cannot train under "
                f"{spec.strategy}: a custom training loop only")
    return None
