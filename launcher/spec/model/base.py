"""What every model of cluster.yaml shares: the task types and strategies, the name patterns, the
JSON Schema pieces of the shorthands, the export's verdict on a key, and ``OptionsModel``."""

from __future__ import annotations

import re
from typing import Annotated, Optional

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict

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
NONBLANK = r"\S"  # a string with something in it besides white space
POSINT = {"type": "integer", "minimum": 1}


# ---------------------------------------------------------------- scalar types: strict, as the schema is
# The loader reads numbers and flags exactly as `tfcluster schema` (JSON Schema) does, so an editor and
# `tfcluster validate` give one verdict (docs/concepts/spec.md, "Types"): a string is never read as a
# number ('120', '1e3'), nor a boolean as a number (true is not 1) or a number as a boolean. The one
# conversion is JSON Schema's own: a number with no fraction is an integer (2.0 is 2).


def whole_number(value: object) -> object:
    """``2.0`` as ``2``: JSON Schema's ``integer`` is any number without a fraction, so a count or a
    port written ``2.0`` is the whole number 2; ``2.5``, ``'2'`` and ``true`` stay what they are (and
    are refused by the strict int after it)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# (The bounds go before the BeforeValidator: after it, pydantic writes them into the schema as "ge".)
Whole = Annotated[int, Strict(), BeforeValidator(whole_number)]
"""A whole number: an int, or a float without a fraction."""
UInt = Annotated[int, Strict(), Ge(0), BeforeValidator(whole_number)]
"""A whole number >= 0 (a count)."""
PosInt = Annotated[int, Strict(), Ge(1), BeforeValidator(whole_number)]
"""A whole number >= 1."""
Port = Annotated[int, Strict(), Ge(1), Le(65535), BeforeValidator(whole_number)]
"""A TCP port, 1 to 65535."""
Seconds = Annotated[float, Strict()]
"""A duration in seconds: an int or a float, never a string or a boolean."""
Flag = Annotated[bool, Strict()]
"""true or false, never 1, 'yes' or 'on'."""


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
