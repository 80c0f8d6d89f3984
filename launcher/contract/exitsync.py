"""A MultiWorkerMirroredStrategy task's end: it leaves once every worker of its group has ended
its script too (a barrier on TensorFlow's own coordination service), at most END_WAIT seconds.

Why: a worker answers a peer's pull of a collective's buffer (``RecvBuf``) by copying the buffer
into the gRPC reply, queueing the reply, and only then letting its own collective complete
(tensorflow/core/distributed_runtime/rpc/grpc_worker_service.cc, ``GrpcWorker::RecvBufAsync``:
``done(status)`` before ``BufRendezvous::DoneWithHook``). A worker whose script ends right after
its last step can therefore be gone before that reply is on the wire, and its peer fails its last
step with ``Collective ops is aborted by: Socket closed ... RecvBuf``: a run that trained to the
end reported as failed. A cold start's interpreter teardown takes about a second with TensorFlow
loaded, which hides the window; a task forked by its host's zygote ends at once (``os._exit``
after atexit, launcher/remote/zygotechild.py), which shows it on a busy host. Waiting for the
peers closes it for both: once every worker has reached the barrier, no collective is under way.

Only a task whose script ended well (exit 0) waits: a failed one leaves at once, so its peers fail
fast. Where nobody else arrives (a peer that exits by ``os._exit``, or the chief's long final
export that the others do not share) the wait ends after END_WAIT seconds, the chief's own call
returns the barrier's failure at once, and every task still exits with its own code.

Stdlib only, no ``from __future__`` and no import of its own package's: the standby stub
(launcher/remote/pystandby.py) carries this text; the reference worker imports it.
"""

import sys

# Seconds a task that ended well waits for its peers. The window it closes is the reply to a pull
# the peer had already made (its last collective began before ours could end): milliseconds to
# move the last chunk. Longer waits only delay the end of a group whose chief works on alone.
END_WAIT = 5.0
END_BARRIER = "tfcluster-exit"


def exit_together(strategy, code=0, wait=END_WAIT):
    """Wait at the exit barrier when this task ended well (``code`` 0 or None) under
    MultiWorkerMirroredStrategy (``strategy``, the plan's TFCLUSTER_STRATEGY) with TensorFlow's
    coordination service running in this process. Returns what it did, in words (for tests):
    ``passed``, ``failed: ...`` (the wait ran out, or a peer is gone), or why it did not wait.
    Never raises; imports nothing the script did not."""
    if code not in (0, None):
        return "not waited: the task failed"
    if strategy != "multi_worker_mirrored":
        return "not waited: not MultiWorkerMirroredStrategy"
    if "tensorflow" not in sys.modules:
        return "not waited: no TensorFlow in this process"
    try:
        from tensorflow.python.eager import context

        ctx = context.context()
        if not ctx.coordination_service or getattr(ctx, "_context_handle", None) is None:
            return "not waited: no coordination service (no cluster in TF_CONFIG, or no strategy made)"
        ctx.wait_at_barrier(END_BARRIER, int(wait * 1000))
    except Exception as exc:  # noqa: BLE001 - the task ends with its own code whatever this says
        return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return "passed"
