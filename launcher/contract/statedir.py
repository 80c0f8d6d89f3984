"""Where the bundled worker (``python -m worker``) keeps its state under the state dir.

The one place these names are written: the launcher copies and fetches these directories
(state.sync: copy), and ``worker/layout.py`` builds its paths from them.
"""

from __future__ import annotations

# Keras BackupAndRestore (model.fit): what a restarted MWMS group restores from.
BACKUP = "backup"
# ModelCheckpoint weights (fit) for the evaluator.
CHECKPOINTS = "checkpoints"
# tf.train.CheckpointManager checkpoints of the custom loops (what they restore from).
CUSTOM_CHECKPOINTS = CHECKPOINTS + "/custom"
# The final SavedModel, written by the chief.
FINAL_MODEL = "final_model"
# TensorBoard logs: the logdir of `tfcluster tensorboard`, one run per subdirectory.
TENSORBOARD = "tensorboard"
# The chief's training scalars (loss, accuracy, examples/s, learning rate per epoch).
TENSORBOARD_TRAIN = TENSORBOARD + "/train"
# The evaluator's scalars (loss, accuracy per evaluated checkpoint).
TENSORBOARD_EVAL = TENSORBOARD + "/eval"

# What every MWMS worker restores from: copied from the chief's host before each attempt when
# the state dir is not shared (state.sync: copy). Only the latest complete checkpoint of each
# directory that holds a ``checkpoint`` state file is copied.
RESUME_AREAS = (BACKUP, CUSTOM_CHECKPOINTS)
