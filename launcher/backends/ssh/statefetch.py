"""The state dir's fetch after a successful run: areas of the chief's host's state dir (the final
model, the TensorBoard logs, with ``state.fetch: checkpoints`` also the checkpoints) into the
run's local ``runs/<name>/state/``, through the same verified unpack as the copy."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import LaunchError
from launcher.remote import statesync as sync_lib
from launcher.backends.ssh.statecopy import CHUNK, mb, open_channel, sender_summary, state_command

if TYPE_CHECKING:  # pragma: no cover
    from launcher.notices import Notices
    from launcher.backends.ssh.pool import HostPool


def fetch(pool: "HostPool", src: str, areas: list[str], local: Path, io_timeout: float,
          console: "Notices") -> tuple[list[str], int, float]:
    """``areas`` of ``src``'s state dir into ``local`` (only those that came replace the local
    ones); said on the console. The areas that came, the bytes and the seconds it took."""
    hs = pool.hosts[src]
    started = time.monotonic()
    try:
        chan = open_channel(pool, src, state_command(hs.python, "pack", hs.state_dir, areas), io_timeout)
    except Exception as exc:  # noqa: BLE001
        raise LaunchError(f"host {src}: cannot fetch the final model ({exc}); it is still in {hs.state_dir} "
                          "there") from None
    tmp = None
    try:
        reader = sync_lib.HashingReader(lambda: chan.recv(CHUNK))
        try:
            tmp = sync_lib.extract(reader, str(local))
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"host {src}: fetching {', '.join(areas)} failed: {sync_lib.describe(exc)}; "
                              f"it is still in {hs.state_dir} there") from None
        summary = sender_summary(chan, io_timeout)
        problem = summary.get("error") or reader.matches(summary)
        if problem:
            raise LaunchError(f"host {src}: fetching {', '.join(areas)} failed: {problem}; it is still in "
                              f"{hs.state_dir} there")
        present = [a for a in areas if (Path(tmp) / a).exists()]
        # Only what came: an entrypoint that saved no final model leaves the local one alone.
        sync_lib.commit(tmp, str(local), present)
        tmp = None
    finally:
        if tmp:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        chan.close()
    took = time.monotonic() - started
    if present:
        console.info(f"fetched {', '.join(present)} from {src} ({mb(reader.size)}) into {local} "
                     f"in {took:.1f} s")
    else:
        console.info(f"nothing to fetch: no {', '.join(areas)} in {hs.state_dir} on {src}")
    return present, reader.size, took
