"""Where the bundled worker (``python -m worker``) keeps its state under the state dir.

The worker defines the layout (``worker/layout.py``); the launcher does not import the worker
package (an ops laptop may have only the launcher), so the names it needs are repeated once,
here, and ``tests/unit/test_statesync_spec.py`` checks them against ``worker.layout`` so the two
cannot drift apart.
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

# What every MWMS worker restores from: copied from the chief's host before each attempt when
# the state dir is not shared (state.sync: copy). Only the latest complete checkpoint of each
# directory that holds a ``checkpoint`` state file is copied.
RESUME_AREAS = (BACKUP, CUSTOM_CHECKPOINTS)
