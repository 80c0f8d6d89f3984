"""The cluster spec's models: cluster.yaml as frozen pydantic values, one module per topic.

base.py     what every model shares: task types, strategies, name patterns, schema pieces, the
            export's verdict on a key (``Export``), ``OptionsModel``
tasks.py    ``hosts:``, ``tasks:``, ``ports:``
recovery.py ``restart:``, ``elastic:``, ``discovery:``, ``watchdog:``, ``state:``
devices.py  ``devices:``, ``collective:``, ``tpu:``
cluster.py  the top level (``Spec``) and ``LoadedSpec``

A leaf: the package imports nothing from the rest of tfcluster. The backends import it for their
options blocks (``OptionsModel``) and for ``Spec``/``Host``; the loader (launcher/loader/load.py),
above the backends, composes the options blocks into the Spec class, and launcher/loader/rules.py
runs the rules that span fields, the backends' among them. Every name is imported from here
(``from launcher.spec.model import Spec``), not from the topic modules, which may move.
"""

from launcher.spec.model.base import (
    CLUSTER_STRATEGIES,
    EXPORTED,
    IMAGE_RE,
    LOCAL_ONLY,
    NOT_EXPORTED,
    RESERVED_ENV,
    SINGLE_HOST_STRATEGIES,
    STRATEGIES,
    TASK_TYPES,
    Export,
    OptionsModel,
    Flag,
    PosInt,
    Port,
    Seconds,
    UInt,
    Whole,
    export_verdicts,
    whole_number,
)
from launcher.spec.model.cluster import LoadedSpec, Spec
from launcher.spec.model.devices import Collective, Devices, Tpu
from launcher.spec.model.recovery import Discovery, Elastic, Restart, State, Watchdog
from launcher.spec.model.tasks import Host, Ports, TaskGroup, TaskCounts

__all__ = [
    "CLUSTER_STRATEGIES", "EXPORTED", "IMAGE_RE", "LOCAL_ONLY", "NOT_EXPORTED", "RESERVED_ENV", "SINGLE_HOST_STRATEGIES",
    "STRATEGIES", "TASK_TYPES", "Collective", "Devices", "Discovery", "Elastic", "Export", "Host", "LoadedSpec",
    "OptionsModel", "Ports", "Restart", "Spec", "State", "TaskGroup", "TaskCounts", "Tpu", "Watchdog", "export_verdicts",
    "Flag", "PosInt", "Port", "Seconds", "UInt", "Whole", "whole_number",
]
