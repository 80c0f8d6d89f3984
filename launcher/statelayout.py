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
# TensorBoard logs (train/ from the chief, eval/ from the evaluator).
TENSORBOARD = "tensorboard"

# What every MWMS worker restores from: copied from the chief's host before each attempt when
# the state dir is not shared (state.sync: copy). Only the latest complete checkpoint of each
# directory that holds a ``checkpoint`` state file is copied.
RESUME_AREAS = (BACKUP, CUSTOM_CHECKPOINTS)
