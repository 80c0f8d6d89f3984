"""TPUStrategy: resolve, connect to and initialise a TPU (``strategy: tpu``).

``tpu: {name: local}`` is the TPU of a TPU VM this task runs on; any other name is a Cloud TPU
(with ``zone`` and ``project`` when they cannot be discovered). Untested on a real TPU: on a
machine without one this fails in seconds with ``TpuUnavailable``, one line that names the
TPU and what was tried, which ``python -m worker`` turns into exit code 2 (permanent: the
launcher does not retry a missing TPU).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional


class TpuUnavailable(Exception):
    """No usable TPU; the message is one line for the user. ``stuck``: the attempt still runs in
    its thread (inside TensorFlow, perhaps holding its locks), so the process must not finalize
    the interpreter around it: the worker ends with ``os._exit``."""

    def __init__(self, message: str, stuck: bool = False) -> None:
        super().__init__(message)
        self.stuck = stuck


def resolver_args(name: str, zone: Optional[str] = None, project: Optional[str] = None) -> dict[str, Any]:
    """TPUClusterResolver's arguments for the spec's ``tpu:`` block."""
    return {"tpu": name or "local", "zone": zone, "project": project}


def describe(args: dict[str, Any]) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in args.items() if k != "tpu" and v)
    return f"TPUClusterResolver(tpu={args['tpu']!r}{extra})"


def connect(name: str, zone: Optional[str] = None, project: Optional[str] = None, timeout: float = 120.0,
            resolver_cls: Optional[Callable[..., Any]] = None):
    """Resolve, connect to the cluster and initialise the TPU system; returns the resolver.
    Every failure (and a resolver that does not answer within ``timeout`` s) is TpuUnavailable."""
    import tensorflow as tf

    args = resolver_args(name, zone, project)
    resolver_cls = resolver_cls or tf.distribute.cluster_resolver.TPUClusterResolver
    stage = ["resolving"]
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            resolver = resolver_cls(**args)
            stage[0] = "connecting to"
            tf.config.experimental_connect_to_cluster(resolver)
            stage[0] = "initialising"
            tf.tpu.experimental.initialize_tpu_system(resolver)
            outcome["resolver"] = resolver
        except Exception as exc:  # noqa: BLE001 - every cause becomes the one line below
            outcome["error"] = exc

    # In a thread: resolving a Cloud TPU by name may wait on the GCE metadata server.
    thread = threading.Thread(target=attempt, name="tfcluster-tpu", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TpuUnavailable(f"TPU {args['tpu']!r}: {describe(args)} did not answer within {timeout:g} s while "
                             f"{stage[0]} it; check tpu.name, tpu.zone and tpu.project", stuck=True)
    if "error" in outcome:
        exc = outcome["error"]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if len(first) > 160:
            first = first[:157] + "..."
        hint = ("this machine has no TPU; run on a TPU VM, or name your Cloud TPU with tpu.name, tpu.zone and "
                "tpu.project" if args["tpu"] == "local" else "check that the TPU exists and is READY "
                "(gcloud compute tpus list), and its zone and project")
        raise TpuUnavailable(f"TPU {args['tpu']!r} not usable: {stage[0]} it with {describe(args)} failed "
                             f"({type(exc).__name__}: {first}); {hint}")
    return outcome["resolver"]


def make_strategy(name: str, zone: Optional[str] = None, project: Optional[str] = None, timeout: float = 120.0):
    import tensorflow as tf

    return tf.distribute.TPUStrategy(connect(name, zone, project, timeout))
