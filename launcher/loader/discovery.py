"""Host discovery: ``discovery: {command: "...", every: 30, timeout: 10}``.

A command run on the launcher's machine prints the hosts that exist now, in the fields of
``hosts:`` entries: a YAML or JSON list of mappings (``- {name: vm1, ssh: me@vm1, address:
10.0.0.2}``), or plain lines ``name address [ssh-target]`` (``#`` starts a comment). tfcluster
runs it at ``up`` (and at ``plan --discover``, where the user asks for it), never while it only
reads a spec (``validate``, ``plan``, ``compose``, ``export``: a spec may come from anyone, its
command runs only when the user runs the spec), and, during a run, every ``every`` seconds: hosts that appear are new spares (or a shrunk group's grow targets, once they answer
for ``elastic.settle`` s), hosts that vanish are lost (launcher/plan/elastic.py).

A command that fails, hangs past ``timeout`` or prints something that is not a host list keeps
the last good list and says why in one line; it never stops a running group. At the start,
with no list yet, it is an error (nothing is started).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import yaml
from pydantic import ValidationError

from launcher.bounded import listing, shorten_quoted, shown
from launcher.errors import SpecError, exc_text
from launcher.system.procinfo import OutputTooLarge, run_bounded
from launcher.spec.model import Host, LoadedSpec
from launcher.loader.rules import check_rules
from launcher.spec.yamlread import SPEC_ITEMS, YAMLBoundError, YAMLBounds, load_yaml, shown_dotted

# Bounds on what the command prints (no host list comes near them): past one, the output is refused
# in one line and the last good list is kept. The host count is the spec's own bound on a list.
OUTPUT_BYTES = 8 << 20  # 100,000 hosts of about 80 bytes each
LINE_CHARS = 4096  # one line of plain 'name address ssh-target'
_STDERR_BYTES = 64 << 10  # of what it says on stderr, kept for the one line
_BOUNDS = YAMLBounds(depth=16, values=2_000_000, items=SPEC_ITEMS, chars=LINE_CHARS,
                     fix="print a list of hosts: 'name address [ssh-target]' per line, or a YAML/JSON list")


class DiscoveryError(Exception):
    """One line: why the command gave no host list."""


def parse_hosts(text: str) -> list[Host]:
    """The hosts in a discovery command's output (see the module doc); DiscoveryError if it is
    not a host list. An empty output is an empty list (every host gone). Output past the bounds
    above is a DiscoveryError too, whatever it holds."""
    if len(text) > OUTPUT_BYTES:
        raise DiscoveryError(f"output of {len(text):,} characters, above the bound of {OUTPUT_BYTES:,}")
    stripped = text.strip()
    if not stripped:
        return []
    data: Any = None
    if stripped[0] in "[{-":
        try:
            data = json.loads(stripped) if stripped[0] in "[{" else _yaml(stripped)
        except RecursionError:
            raise DiscoveryError(f"output nested more than {_BOUNDS.depth} deep") from None
        except (ValueError, yaml.YAMLError):
            data = _yaml(stripped)
    if data is None:
        data = [_line_entry(n, line) for n, line in enumerate(stripped.splitlines(), 1)
                if line.strip() and not line.lstrip().startswith("#")]
    if isinstance(data, dict) and isinstance(data.get("hosts"), list):
        data = data["hosts"]  # `hosts: [...]`, as in cluster.yaml
    if not isinstance(data, list):
        raise DiscoveryError(f"output is a {type(data).__name__}, not a list of hosts")
    if len(data) > SPEC_ITEMS:
        raise DiscoveryError(f"output lists {len(data):,} hosts, above the bound of {SPEC_ITEMS:,}")
    hosts: list[Host] = []
    for i, entry in enumerate(data, 1):
        if not isinstance(entry, dict):
            raise DiscoveryError(f"host {i} of the output is {shown(entry)}, not a mapping with name (and ssh, address)")
        try:
            hosts.append(Host(**entry))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = shown_dotted(tuple(err["loc"])) if err.get("loc") else ""
            said = shorten_quoted(str(err.get("msg")), err.get("input"))
            raise DiscoveryError(f"host {i} of the output: {where + ': ' if where else ''}{said}") from None
        except TypeError as exc:
            raise DiscoveryError(f"host {i} of the output: {shown(str(exc))}") from None
    seen: set[str] = set()
    for h in hosts:  # (a set: 100,000 names are 100,000 look-ups)
        if h.name in seen:
            raise DiscoveryError(f"host {h.name} is listed twice in the output")
        seen.add(h.name)
    return hosts


def _yaml(text: str) -> Any:
    """``text`` as YAML, within _BOUNDS: the spec loader's own bounded parse."""
    try:
        return load_yaml(text, _BOUNDS)[0]
    except YAMLBoundError as exc:
        line = f"line {exc.mark.line + 1}: " if exc.mark else ""
        raise DiscoveryError(f"output {line}{exc.message.split('; ')[0]}") from None
    except yaml.MarkedYAMLError as exc:
        raise DiscoveryError(f"output is neither a YAML/JSON list nor host lines ({shown(exc.problem or exc.context or 'invalid YAML', 120)[1:-1]})") from None
    except yaml.YAMLError as exc:
        raise DiscoveryError(f"output is neither a YAML/JSON list nor host lines ({shown(_first_line(str(exc)), 120)[1:-1]})") from None


def _line_entry(n: int, line: str) -> dict:
    if len(line) > LINE_CHARS:
        raise DiscoveryError(f"line {n} of the output is {len(line):,} characters long, above the bound of "
                             f"{LINE_CHARS:,}; print 'name address [ssh-target]' per line, or a YAML/JSON list")
    parts = line.split()
    if len(parts) > 3:
        raise DiscoveryError(f"line {n} of the output has {len(parts)} fields: {shown(line.strip())}; "
                             "print 'name address [ssh-target]' per line, or a YAML/JSON list")
    entry = {"name": parts[0]}
    if len(parts) > 1:
        entry["address"] = parts[1]
    if len(parts) > 2:
        entry["ssh"] = parts[2]
    return entry


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def run_discovery(command: str, timeout: float, cwd: Path) -> list[Host]:
    """Run the command in a shell in ``cwd``; its hosts, or DiscoveryError (a non-zero exit, a
    hang past ``timeout`` seconds, output past OUTPUT_BYTES, or output that is not a host list).
    What it prints is read as it comes, never more than the bound (a runaway command's output
    does not grow the launcher). However it ends, its whole process group ends with it, and so
    does any process it started that still holds its output pipe (launcher/system/procinfo.py)."""
    try:
        code, out, err = run_bounded(["/bin/sh", "-c", command], timeout, cwd=cwd, out_bytes=OUTPUT_BYTES,
                                     err_bytes=_STDERR_BYTES)
    except OSError as exc:
        raise DiscoveryError(f"cannot run it ({exc.strerror})") from None
    except subprocess.TimeoutExpired:
        raise DiscoveryError(f"no answer within {timeout:g} s (discovery.timeout); the command was stopped") from None
    except OutputTooLarge:
        raise DiscoveryError(f"printed more than {OUTPUT_BYTES:,} bytes (the bound on a host list); the command "
                             "was stopped") from None
    out_text, err_text = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if code != 0:
        said = _first_line(err_text or out_text)
        raise DiscoveryError(f"exited with {code}" + (f": {shown(said, 200)[1:-1]}" if said else ""))
    return parse_hosts(out_text)


def merge(static: Sequence[Host], found: Sequence[Host]) -> tuple[Host, ...]:
    """The spec's own hosts first, then the discovered ones not named there."""
    names = {h.name for h in static}
    return tuple(static) + tuple(h for h in found if h.name not in names)


def with_discovered(loaded: LoadedSpec) -> LoadedSpec:
    """``loaded`` with the hosts its discovery command prints now added to ``hosts:`` (as it is
    without ``discovery:``); SpecError in one line naming ``discovery.command`` if there is no
    list, or the spec's rules once the hosts are known."""
    spec = loaded.spec
    if spec.discovery is None:
        return loaded
    try:
        found = run_discovery(spec.discovery.command, spec.discovery.timeout, loaded.base_dir)
    except DiscoveryError as exc:
        raise SpecError(f"{_where(loaded.path)}: discovery.command: {exc}; fix the command (it must print the hosts "
                        "that exist now) or list hosts under hosts:") from None
    merged = spec.model_copy(update={"hosts": merge(spec.hosts, found)})
    problems = check_rules(merged)
    if problems:
        raise SpecError(*[f"{loaded.path}: {'.'.join(str(p) for p in loc)}: {msg} (with the hosts "
                          f"discovery.command printed: {listing([h.name for h in found], 'hosts') or 'none'})"
                          for loc, msg in problems[:20]])
    return LoadedSpec(merged, loaded.path)


def _where(path: Path) -> str:
    """``FILE:LINE`` of ``discovery.command`` in the spec file (``FILE`` if it cannot be found)."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
        for key, value in root.value:
            if key.value == "discovery":
                for k, v in value.value:
                    if k.value == "command":
                        return f"{path}:{v.start_mark.line + 1}"
                return f"{path}:{key.start_mark.line + 1}"
    except Exception:  # noqa: BLE001 - a position is a nicety; the message stands without it
        pass
    return str(path)


@dataclass(frozen=True)
class Answer:
    """One run of the command: the hosts (None when it failed) and the line saying why not."""

    at: float
    hosts: Optional[tuple[Host, ...]]
    problem: str = ""


class Poller:
    """Runs the command every ``every`` seconds in a thread of its own; ``latest()`` is the last
    answer, good or not (the supervisor keeps the last good list itself)."""

    def __init__(self, command: str, every: float, timeout: float, cwd: Path,
                 run: Callable[[str, float, Path], list[Host]] = run_discovery) -> None:
        self.command, self.every, self.timeout, self.cwd, self._run = command, every, timeout, cwd, run
        self._latest: Optional[Answer] = None
        self._count = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="discovery")

    def start(self) -> "Poller":
        self._thread.start()
        return self

    def latest(self) -> tuple[int, Optional[Answer]]:
        """(how many answers so far, the last one)."""
        with self._lock:
            return self._count, self._latest

    def close(self) -> None:
        self._closing.set()

    def _loop(self) -> None:
        while not self._closing.wait(self.every):
            try:
                answer = Answer(time.time(), tuple(self._run(self.command, self.timeout, self.cwd)))
            except DiscoveryError as exc:
                answer = Answer(time.time(), None, str(exc))
            except Exception as exc:  # noqa: BLE001 - never let the thread die silently
                answer = Answer(time.time(), None, exc_text(exc))
            with self._lock:
                self._latest, self._count = answer, self._count + 1
