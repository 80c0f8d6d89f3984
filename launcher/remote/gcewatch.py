"""The wrapper's watch of GCE's preemption notice (taskwrap.py ``--gce-metadata auto|on``): the
metadata server's preemption flag, long-polled until it reads TRUE. Stdlib only, shipped beside
taskwrap.py, which imports it only where the watch is on."""

import os
import re
import threading

DEFAULT = "metadata.google.internal"
PATH = "/computeMetadata/v1/instance/preempted"
BODY = 64  # bytes of the reply read: TRUE or FALSE
ETAG = re.compile(r"[0-9A-Za-z_.-]{1,128}")  # (fullmatch)


def metadata_host(mode: str) -> str:
    """The metadata server to watch for the preemption notice, or "" (off). ``on``: always;
    ``auto``: when GCE_METADATA_HOST is set or the machine's DMI product name says Google
    Compute Engine (as google-auth checks, with no network request)."""
    if mode == "off":
        return ""
    host = os.environ.get("GCE_METADATA_HOST", "")
    if mode == "on":
        return host or DEFAULT
    if host:
        return host
    try:
        with open("/sys/class/dmi/id/product_name") as fh:
            return DEFAULT if "Google" in fh.read() else ""
    except OSError:
        return ""


def watch(host: str, on_notice, stopping: threading.Event) -> None:
    """Long-poll the preemption flag (``?wait_for_change=true``) until it reads TRUE, then call
    ``on_notice`` once. A server that does not answer is asked again a little later."""
    import http.client

    last = ""
    while not stopping.is_set():
        query = PATH + ("?wait_for_change=true" + (f"&last_etag={last}" if last else "") if last else "")
        try:
            conn = http.client.HTTPConnection(host, timeout=330)
            conn.request("GET", query, headers={"Metadata-Flavor": "Google"})
            reply = conn.getresponse()
            # The flag is TRUE or FALSE: a longer body is not read (a server sending gigabytes does not
            # fill this host's memory); http.client bounds the header lines.
            body = reply.read(BODY).decode(errors="replace").strip()
            etag = reply.getheader("ETag") or "0"
            conn.close()
        except (OSError, http.client.HTTPException):
            stopping.wait(2.0)
            continue
        if reply.status != 200:
            stopping.wait(5.0)
            continue
        if body.upper() == "TRUE":
            on_notice()
            return
        if not ETAG.fullmatch(etag):  # it goes into the next request's URL: only what an ETag holds
            stopping.wait(5.0)
            last = ""
            continue
        last = etag
