"""What every model of cluster.yaml shares: the task types and strategies, the name patterns, the
JSON Schema pieces of the shorthands, the export's verdict on a key, and ``OptionsModel``."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import BaseModel, ConfigDict

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
# Cluster strategies run a TF cluster over tasks and hosts; single-host strategies run one task.
CLUSTER_STRATEGIES = ("multi_worker_mirrored", "parameter_server")
SINGLE_HOST_STRATEGIES = ("mirrored", "central_storage", "one_device", "default", "tpu")
STRATEGIES = CLUSTER_STRATEGIES + SINGLE_HOST_STRATEGIES
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by tfcluster for every task; a user value would silently be overwritten.
RESERVED_ENV = ("TF_CONFIG",)
# A container image reference (lowercase): docker.image, and the --image of compose and export.
IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")


# ---------------------------------------------------------------- JSON Schema of the shorthands
# The models read several values in more than one form (``worker: 2`` for ``{count: 2}``, ``auto``
# or a number, ...) through before-validators, which pydantic's generated schema cannot see. Each
# such field declares the forms it accepts (``WithJsonSchema``), so ``tfcluster schema`` accepts
# every spec the loader accepts, and an editor completes and checks them.

UINT = {"type": "integer", "minimum": 0}
POSINT = {"type": "integer", "minimum": 1}


class Export(str):
    """What ``tfcluster export`` does with a top-level key of the spec, declared on the key itself
    (``name: Annotated[str, EXPORTED]``) so that a new key comes with its answer; launcher/export/common.py
    asks ``export_verdicts`` and tests/unit/export/test_export_errors.py fails for a key without one."""


EXPORTED = Export("exported")  # the export writes it into the engine's job (or checks its values there)
LOCAL_ONLY = Export("local only")  # it only concerns tfcluster on this machine: ignored by the export
NOT_EXPORTED = Export("not exported")  # set, an engine cannot express it: the export refuses it, one line


def export_verdicts(model: type[BaseModel]) -> dict[str, Optional[Export]]:
    """Each top-level key of ``model`` (a Spec class) and its ``Export`` verdict (None: it has none)."""
    return {name: next((m for m in info.metadata if isinstance(m, Export)), None)
            for name, info in model.model_fields.items()}


class OptionsModel(BaseModel):
    """The base of every block of cluster.yaml, the backends' and export's options blocks too:
    frozen, and a key it does not know is an error. A field's docstring is its description (in
    ``tfcluster schema`` and the generated spec reference)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, use_attribute_docstrings=True)
