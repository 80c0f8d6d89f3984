"""Training entrypoints that tfcluster starts: ``python -m worker``.

Every task reads its role from TF_CONFIG. We use tf_keras (Keras 2) deliberately: in TF 2.21
Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy and does not support
ParameterServerStrategy. TF_USE_LEGACY_KERAS=1 makes ``tf.keras`` the same tf_keras, so no
Keras 3 object can leak into a distributed model by accident.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Keep TF's C++ logging to warnings and errors: task logs are read by people.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
