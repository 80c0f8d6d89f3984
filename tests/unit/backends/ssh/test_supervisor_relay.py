"""The ssh.supervisor relay shows the remote host's bytes as ``logs`` shows a task's output: on a
terminal colours are kept and every other escape (a title, an OSC 52 clipboard write, DCS, APC)
and control byte is dropped; into a pipe the bytes are their own; a line is bounded either way.
The real host is in tests/integration/ssh/test_ssh_detach.py."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from launcher.backends.ssh.supervisor import _Relay

REMOTE = SimpleNamespace(loaded=SimpleNamespace(path="/home/me/cluster.yaml"),
                         spec_path=".tfcluster/t/supervisor/cluster.yaml")
HOSTILE = (b"[worker:0] \x1b[31mred\x1b[0m \x1b]52;c;ZXZpbA==\x07\x1b]0;PWNED\x1b\\\x1bP1$r\x1b\\"
           b"\x1b_apc\x1b\\\x1b[2J\x07done\n")


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _relayed(chunks, tty: bool, limit: int = 1 << 20) -> str:
    out = Stream(tty)
    relay = _Relay(out, REMOTE, limit)
    for chunk in chunks:
        relay.feed(chunk)
    relay.flush()
    return out.getvalue()


@pytest.mark.parametrize("split", [1, 3, 7, len(HOSTILE)])
def test_on_a_terminal_colours_stay_and_every_other_escape_goes_however_the_bytes_arrive(split):
    chunks = [HOSTILE[i:i + split] for i in range(0, len(HOSTILE), split)]
    assert _relayed(chunks, tty=True) == "[worker:0] \x1b[31mred\x1b[0m done\n"


def test_into_a_pipe_the_bytes_are_their_own():
    assert _relayed([HOSTILE], tty=False) == HOSTILE.decode()


def test_an_over_long_line_is_cut_with_a_note_and_the_next_line_is_whole():
    text = _relayed([b"x" * 50, b"y" * 50, b"z" * 5000 + b"\nnext\n"], tty=True, limit=64)
    assert text.splitlines() == ["x" * 50 + "y" * 14 + " ...(5,036 bytes of this line cut)", "next"]


def test_the_copys_path_is_shown_as_the_users_spec():
    text = _relayed([b"tfcluster down /root/.tfcluster/t/supervisor/cluster.yaml\n"], tty=True)
    assert text == "tfcluster down /home/me/cluster.yaml\n"
