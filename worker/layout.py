"""The state directory's layout, the one place it is written down (trainers, evaluator, tests).

    model_dir/backup/                   tf_keras BackupAndRestore (fit; deleted once the final model is saved)
    model_dir/checkpoints/ckpt-NNN      ModelCheckpoint weights per epoch (fit; NNN = epoch)
    model_dir/checkpoints/custom/ckpt-N tf.train.CheckpointManager (custom loop; N = global step)
    model_dir/final_model/              the final Keras SavedModel (chief only)
    model_dir/tensorboard/train         the chief's training scalars per epoch (worker/tensorboard.py)
    model_dir/tensorboard/eval          the evaluator's scalars per checkpoint
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The names are the launcher's (it copies and fetches these directories without importing TF).
from launcher.contract import statedir as names


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def backup(self) -> Path:
        return self.root / names.BACKUP

    @property
    def checkpoints(self) -> Path:
        return self.root / names.CHECKPOINTS

    @property
    def custom_checkpoints(self) -> Path:
        return self.root / names.CUSTOM_CHECKPOINTS

    @property
    def final(self) -> Path:
        return self.root / names.FINAL_MODEL

    @property
    def tensorboard(self) -> Path:
        return self.root / names.TENSORBOARD

    @property
    def tensorboard_train(self) -> Path:
        return self.root / names.TENSORBOARD_TRAIN

    @property
    def tensorboard_eval(self) -> Path:
        return self.root / names.TENSORBOARD_EVAL

    def fit_checkpoint(self) -> str:
        """ModelCheckpoint's filepath pattern (formatted by tf_keras with the epoch)."""
        return str(self.checkpoints / "ckpt-{epoch:03d}")

    def checkpoint_dir(self, loop: str) -> Path:
        """Where the evaluator watches: fit's per-epoch weights, or the custom loop's manager."""
        return self.custom_checkpoints if loop == "custom" else self.checkpoints

    @staticmethod
    def checkpoint_name(loop: str, number: int) -> str:
        """``ckpt-003`` (fit, epoch 3) or ``ckpt-120`` (custom, global step 120)."""
        return f"ckpt-{number}" if loop == "custom" else f"ckpt-{number:03d}"
