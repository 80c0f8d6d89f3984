"""A task's stream as its wrapper framed it (launcher/remote/taskstream.py), decoded in one place:
every backend's reader thread feeds it the bytes it reads (the local wrapper's pipe, the ssh
session, the container's log stream, srun's output) and it hands the task's own lines and its
control lines to the supervisor apart (``OutputSink``).

* A data frame (and the parts before it) is one line of the task's output, whatever it holds: a
  ``tfcluster-beat ... stacks=9`` the task printed stays a line of its output, byte for byte.
* A control frame is a control line; a wrapper frame is the wrapper's line, offered to the backend
  first (``wrapper``: the ssh backend takes its lease and GCE notices, its GPU figures), else shown
  as output.
* A line without a frame came from outside the task and the wrapper (a shell's error before the
  wrapper ran, srun's own messages): output.

**In band** (``framed=False``) is the fallback where no wrapper runs beside the task (a container
of an image without tfcluster's wrapper): the task's own stream carries its control lines, read
by their look: a beat (also after an unfinished line of its own: ``epoch 3 ... tfcluster-beat
n=7``), a progress record or the standby protocol (``progress.parse``). There, what a task prints
can pass for them (docs/concepts/trust.md).

Lines are bounded (``line_bytes``: a longer one is handed on in pieces) and decoded as UTF-8 with
replacement; a trailing CR is dropped (a task's ``\\r\\n``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from launcher.bounded import HOST_LINE_BYTES
from launcher.contract.liveness import BEAT
from launcher.contract.progress import parse
from launcher.remote.taskstream import CONTROL, DATA, MARK, PART, WRAPPER

# Called with (task key, one line without its newline) from reader threads.
LineSink = Callable[[str, str], None]


@dataclass(frozen=True)
class OutputSink:
    """Where a task's reader thread hands what it reads (``Tasks.start``'s ``on_line``), decoded
    once by launcher/backends/channel.py: ``line`` a line of the task's own output (stdout and
    stderr, and what its host said around it), ``control`` a line of its control channel (the
    beats, stacks, progress records and standby protocol; launcher/remote/taskstream.py), which
    nothing the task prints can reach. Called as a function, it takes an output line."""

    line: LineSink
    control: LineSink

    def __call__(self, key: str, text: str) -> None:
        self.line(key, text)

    @classmethod
    def of(cls, sink: "OutputSink | LineSink") -> "OutputSink":
        """``sink`` itself, or a plain function made one: it gets both kinds of line (a caller that
        reads a task's whole stream: a test, a bench)."""
        return sink if isinstance(sink, OutputSink) else cls(sink, sink)


# A wire line longer than this (a frame of LINE_BYTES, or outside bytes without a newline) is cut.
WIRE_BYTES = HOST_LINE_BYTES + 64


class Decoder:
    def __init__(self, key: str, out: OutputSink, framed: bool = True,
                 wrapper: Optional[Callable[[str], bool]] = None, line_bytes: int = HOST_LINE_BYTES) -> None:
        """``out``: where the lines go; ``framed``: the stream is the wrapper's (else in band);
        ``wrapper(text)``: True where the backend took a wrapper line for itself."""
        self.key, self.out, self.framed, self.wrapper = key, OutputSink.of(out), framed, wrapper
        self.line_bytes = line_bytes
        self._pending = b""  # an unfinished wire line
        self._parts = b""  # a line of the task's, sent in parts so far

    def feed(self, data: bytes) -> None:
        """Bytes as they came; every wire line they complete is handed on."""
        pending = self._pending + data
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            self._wire(raw)
        while len(pending) > WIRE_BYTES:  # no newline for that long: handed on in pieces, memory bounded
            self._wire(pending[:WIRE_BYTES])
            pending = pending[WIRE_BYTES:]
        self._pending = pending

    def end(self) -> None:
        """The stream ended: an unfinished wire line, and a line of the task's in parts, handed on."""
        if self._pending:
            self._wire(self._pending)
            self._pending = b""
        if self._parts:
            self._data(b"")

    def _wire(self, raw: bytes) -> None:
        if self.framed and raw[:1] == MARK and len(raw) >= 2:
            tag, body = raw[1:2], raw[2:]
            if tag == DATA:
                self._data(body)
                return
            if tag == PART:
                self._parts += body
                if len(self._parts) >= self.line_bytes:
                    self._data(b"")
                return
            if tag == CONTROL:
                self.out.control(self.key, _text(body))
                return
            if tag == WRAPPER:
                text = _text(body)
                if self.wrapper is None or not self.wrapper(text):
                    self.out.line(self.key, text)
                return
        if self._parts:  # (a line in parts cut by the stream's end, or outside bytes among them)
            self._data(b"")
        if self.framed:
            self.out.line(self.key, _text(raw))
        else:
            self._in_band(_text(raw))

    def _data(self, body: bytes) -> None:
        line, self._parts = self._parts + body, b""
        for at in range(0, max(len(line), 1), self.line_bytes):
            self.out.line(self.key, _text(line[at:at + self.line_bytes]))

    def _in_band(self, text: str) -> None:
        at = text.find(BEAT + " ")
        if at > 0:  # a beat after an unfinished line of the task's own
            self.out.line(self.key, text[:at])
            self.out.control(self.key, text[at:])
        elif at == 0 or parse(text) is not None:
            self.out.control(self.key, text)
        else:
            self.out.line(self.key, text)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")
