"""Outside bytes shown small and harmless: every value an error line quotes goes through here.

A spec, a discovery command's output, a run record or a host's reply may hold anything: a value of
5,000,000 characters, a list of 20,000 names, terminal escape sequences that retitle or clear the
user's terminal. ``shown`` quotes a value shortened and escaped, ``listing`` names a few of many,
``escape`` makes control characters visible, ``one_line`` is the last net for a whole message
(the console passes every error and info line through it). A leaf: it imports nothing of tfcluster.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

# Characters shown of a quoted string before it is cut (``'xxxx...' (5,000,000 characters)``).
SHOWN_CHARS = 60
# Names a listing shows before ``... (20,000 hosts)``.
LISTED = 10
# The longest line the console writes for a message: the head and the tail (the fix) are kept.
LINE_CHARS = 2000
# One line from a host (the agent's and the task wrapper's JSON replies, a task's output line):
# longer is cut (output) or the host's reply counts as garbage (JSON).
HOST_LINE_BYTES = 1 << 20

# C0 controls (tab and newline too: a message is one line), DEL, C1 controls (0x9b is a CSI on some
# terminals), and the bidirectional overrides that make text read other than it is.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_one(m: "re.Match[str]") -> str:
    c = m.group()
    special = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if c in special:
        return special[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape(text: str) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``), never raw."""
    return _CONTROL.sub(_escape_one, text)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A value quoted for an error line: a string as ``'text'`` escaped, cut past ``limit``
    characters (``'xxxx...' (5,000,000 characters)``); a list or mapping briefly, with its size
    when cut; any other value by its repr, bounded too. Never longer than a few times ``limit``."""
    if isinstance(value, str):
        return _quoted(value, limit)
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value[: limit + 1]).decode("utf-8", "replace")
        return _quoted(text, limit, total=len(value), unit="bytes")
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        out: list[str] = []
        budget = [limit * 2]
        _brief(value, out, budget, 0)
        text = "".join(out)
        cut = len(value) > LISTED or budget[0] <= 0  # (not when only its depth was cut)
        return f"{text} ({_count(len(value), _kind(value))})" if cut else text
    return _scalar(value, limit)


def _quoted(text: str, limit: int, total: Optional[int] = None, unit: str = "characters") -> str:
    total = len(text) if total is None else total
    if total <= limit and len(text) <= limit:
        return f"'{escape(text)}'"
    return f"'{escape(text[:limit])}...' ({total:,} {unit})"


def _scalar(value: Any, limit: int) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4,300-digit str() limit
        bits = value.bit_length() if isinstance(value, int) else 0
        return f"a whole number of about {int(bits * 0.30103):,} digits"
    except Exception:  # noqa: BLE001 - a repr that fails is shown as its type
        return f"a {type(value).__name__}"
    return escape(text) if len(text) <= limit else f"{escape(text[:limit])}... ({len(text):,} characters)"


def _kind(value: Any) -> str:
    return "mapping" if isinstance(value, dict) else "list"


def _count(n: int, kind: str) -> str:
    noun = ("entry" if n == 1 else "entries") if kind == "mapping" else ("item" if n == 1 else "items")
    return f"a {kind} of {n:,} {noun}"


def _brief(value: Any, out: list[str], budget: list[int], depth: int) -> None:
    """Append a short repr of ``value`` to ``out``, spending at most about ``budget[0]`` characters;
    nested past a few levels (or shared many times over, as YAML aliases make) it is ``...``."""
    if budget[0] <= 0:
        out.append("...")
        return
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        if depth >= 4:
            out.append("[...]" if not isinstance(value, dict) else "{...}")
            budget[0] -= 5
            return
        is_map = isinstance(value, dict)
        out.append("{" if is_map else "[")
        items = iter(value.items()) if is_map else iter(value)
        for i, item in enumerate(items):
            if i:
                out.append(", ")
                budget[0] -= 2
            if budget[0] <= 0 or i >= LISTED:
                out.append("...")
                break
            if is_map:
                _brief(item[0], out, budget, depth + 1)
                out.append(": ")
                _brief(item[1], out, budget, depth + 1)
            else:
                _brief(item, out, budget, depth + 1)
        out.append("}" if is_map else "]")
        return
    text = shown(value, min(SHOWN_CHARS, max(budget[0], 8)))
    out.append(text)
    budget[0] -= len(text)


def shorten_quoted(msg: str, value: Any) -> str:
    """A validator's message (the models quote the value as ``'{v}'`` or ``{v!r}``, and import
    nothing to shorten it) with each long or unprintable string of ``value`` (the value itself, or
    a mapping's keys) shown bounded instead."""
    if isinstance(value, (list, tuple, dict)) and len(msg) > SHOWN_CHARS * 3:
        text = repr(value)  # ({v!r} of a list or mapping: the whole of it replaced)
        if len(text) > SHOWN_CHARS and text in msg:
            return msg.replace(text, shown(value))
    if isinstance(value, str):
        strings = [value]
    elif isinstance(value, dict):
        strings = [k for k in list(value)[:1000] if isinstance(k, str)]
    else:
        return msg
    for text in strings:
        if len(text) > 60 or not text.isprintable():
            short = shown(text)
            msg = msg.replace(f"'{text}'", short).replace(repr(text), short)
    return msg


def listing(names: Iterable[Any], noun: str, limit: int = LISTED) -> str:
    """``h1, h2, ... (20,000 hosts)``: the first ``limit`` names, each shown, and how many there
    are when that is not all of them (``noun`` is the plural: ``hosts``)."""
    items = list(names) if not isinstance(names, (list, tuple)) else names
    head = [n if isinstance(n, str) and len(n) <= SHOWN_CHARS and not _CONTROL.search(n) else shown(n)
            for n in items[:limit]]
    if len(items) <= limit:
        return ", ".join(head)
    return ", ".join(head) + f", ... ({len(items):,} {noun})"


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """A message made safe for the terminal: control characters escaped (it stays one line), and
    past ``limit`` characters its middle cut, so that where and the fix (the start and the end) stay."""
    text = escape(text)
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]} ...({len(text) - head - tail:,} characters cut)... {text[-tail:]}"


# A task's output shown on a terminal: its colours (SGR: ``ESC [ ... m``) are kept; every other
# escape sequence is dropped with its body: OSC (window title, clipboard writes: OSC 52,
# hyperlinks), DCS, SOS, PM, APC, cursor-moving and screen-clearing CSI, lone ESC; so are C0 controls
# other than tab, newline and carriage return, the C1 controls (U+0080..U+009F: 0x9b is a CSI on some
# terminals) and bytes that are not UTF-8 (shown as U+FFFD). An OSC's body stops at its end (BEL, ST)
# or at the end of the line.
_TERMINAL = re.compile(
    r"(\x1b\[[0-9;:]*m)"
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|([\ud800-\udfff])"
    r"|[\x00-\x08\x0b-\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]"
)


def _terminal_one(m: "re.Match[str]") -> str:
    if m.group(1):
        return m.group(1)
    return "\ufffd" if m.group(2) else ""


def for_terminal(text: str) -> str:
    """A task's output (decoded with ``surrogateescape``) as a terminal may show it: colours kept,
    every other escape sequence and control character dropped (see above)."""
    return _TERMINAL.sub(_terminal_one, text)


def yaml_comment(text: str) -> str:
    """``text`` safe inside a YAML comment: every character that ends a line for YAML (``\\n``,
    ``\\r``, NEL, U+2028/U+2029) or acts on a terminal written as an escape, so that a file name
    cannot start a line of its own (a top-level ``include:`` that Compose would honour)."""
    return escape(text).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\ufeff", "\\ufeff")
