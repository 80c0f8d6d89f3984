"""A host's loss as a fact (``HostLoss``: its kind, the host, since when, and its words), and how it
reads in one line (``lost_phrase``). The backends say which hosts are lost (``Hosts.lost``: the ssh
pool, from a preemption notice or a look that got no answer); the supervisor's membership words
the losses it infers (a dropped session: suspect until the host answers again) and records them
(a host_lost event carries the kind and the time); the replanning (plan/elastic.py, reconcile.py)
and the record's view say them. Control flow reads the kind, never the words. A leaf: the
preflight's refusals may take their kinds from here too."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

SUSPECT = "suspect until"  # the words that close a suspect loss's text (plan/elastic.py's suspect_how)


class LossKind(Enum):
    """How a host was lost; its value is what a host_lost event records (``kind``)."""

    # The host announced it is going (GCE's preemption notice, seen by a task's wrapper): lost at once.
    PREEMPTED = "preempted"
    # A task's session with the host was lost (a dropped connection, a heartbeat silent past the
    # lease) while the host itself still answers.
    SESSION = "session"
    # The host did not answer a look (``Hosts.lost``), whether or not a session was seen to drop.
    UNREACHABLE = "unreachable"
    # Gone from discovery.command's list: lost for good, nothing waits for it.
    DROPPED = "dropped"

    @property
    def suspect(self) -> bool:
        """A loss inferred from silence (a session, a look), which may pass: the host is used again
        once it answers for elastic.settle s without a break. A preemption or a drop is known."""
        return self in (LossKind.SESSION, LossKind.UNREACHABLE)


@dataclass(frozen=True)
class HostLoss:
    """One host lost: ``kind``, the ``host``, ``since`` (time.time() the loss began: the session
    dropped, the notice came, the look began; None where it is not known) and ``text``, its
    words for people without the host's name (``preempted: GCE notice at 12:01:07``, ``session
    lost at 12:01:07, host still answering; suspect until it answers for 30 s``)."""

    kind: LossKind
    host: str
    since: Optional[float] = None
    text: str = ""

    @property
    def suspect(self) -> bool:
        return self.kind.suspect

    def phrase(self, when: str = "") -> str:
        """This loss in one line (``lost_phrase``)."""
        return lost_phrase(self.host, self.text, self.suspect, when)


def lost_phrase(host: str, how: str, suspect: bool, when: str = "") -> str:
    """How a host loss reads in one line: ``h2: session lost at 12:01:07, host still answering;
    suspect until it answers for 30 s`` (a ``suspect`` loss: its words say when it ends), else
    ``h2 lost at 12:01:07 (gone from discovery.command's list)``."""
    if suspect:
        return f"{host}: {how}"
    return f"{host} lost{when}" + (f" ({how})" if how else "")
