"""Outside bytes other than the spec stay small: a discovery command's output and a run record that
is damaged, foreign or huge. Each is one bounded line (no traceback, no raw control character), the
reader's memory bounded: measured with tracemalloc in this process (discovery) or with os.wait4 on
the ``tfcluster`` child (status, runs, logs).
"""

from __future__ import annotations

import json
import re
import time
import tracemalloc
from pathlib import Path

import pytest

from launcher.loader.discovery import LINE_CHARS, OUTPUT_BYTES, DiscoveryError, parse_hosts, run_discovery
from launcher.record.reader import FILE_BYTES
from tests.support.cli import tfcluster_measured

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def discovery_error(command: str, cwd: Path) -> tuple[str, float, float]:
    """The DiscoveryError line of running ``command``, the seconds it took and the peak MB this
    process allocated meanwhile."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(DiscoveryError) as err:
            run_discovery(command, 20, cwd)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    line = str(err.value)
    assert "\n" not in line and len(line) <= 300 and not RAW_CONTROL.search(line), repr(line)
    return line, time.monotonic() - started, peak / 2**20


def test_a_command_that_prints_100_mb_is_stopped_at_the_bound(tmp_path):
    line, seconds, peak_mb = discovery_error("head -c 100000000 /dev/zero | tr '\\0' x", tmp_path)
    assert line == f"printed more than {OUTPUT_BYTES:,} bytes (the bound on a host list); the command was stopped"
    assert seconds < 10 and peak_mb < 3 * OUTPUT_BYTES / 2**20, (seconds, peak_mb)


def test_a_command_whose_stderr_is_endless_keeps_only_its_start(tmp_path):
    line, seconds, peak_mb = discovery_error("head -c 50000000 /dev/zero | tr '\\0' e >&2; exit 4", tmp_path)
    assert line.startswith("exited with 4: 'eeee") or line.startswith("exited with 4: eeee"), line
    assert peak_mb < 8, peak_mb


@pytest.mark.parametrize("text, problem", [
    ("[" * 20_000 + "]" * 20_000, "output nested more than 16 deep"),
    ("- " * 20_000 + "x\n", "output line 1: lists and mappings nested more than 16 deep"),
    ("vm1 " + "a" * (LINE_CHARS + 1) + "\n", f"line 1 of the output is {LINE_CHARS + 5:,} characters long, above the "
                                             f"bound of {LINE_CHARS:,}"),
    ("vm\x1b]0;x\x07 10.0.0.1\n", "host 1 of the output: name: Value error, 'vm\\x1b]0;x\\x07' is not a valid host name"),
    ('[{"name": "vm1", "\\u001b[2J": 1}]', "host 1 of the output: '\\x1b[2J': Extra inputs are not permitted"),
    ("- &a [x, x, x, x, x, x, x, x, x, x]\n- &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "- &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n- &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "- &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n- &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
     "- &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n", "output line 7: aliases (*name) expand it to more than"),
])
def test_output_past_a_bound_or_with_escapes_is_one_bounded_line(text, problem):
    with pytest.raises(DiscoveryError) as err:
        parse_hosts(text)
    line = str(err.value)
    assert problem in line and "\n" not in line and not RAW_CONTROL.search(line) and len(line) <= 300, line


def test_a_list_of_more_hosts_than_a_spec_may_list_is_refused():
    with pytest.raises(DiscoveryError) as err:
        parse_hosts("".join(f"h{i}\n" for i in range(100_001)))
    assert str(err.value) == "output lists 100,001 hosts, above the bound of 100,000"


def test_100000_hosts_with_one_listed_twice_is_fast():
    started = time.monotonic()
    with pytest.raises(DiscoveryError) as err:
        parse_hosts("".join(f"h{i} 10.0.0.1\n" for i in range(99_999)) + "h5 10.0.0.2\n")
    assert str(err.value) == "host h5 is listed twice in the output"
    assert time.monotonic() - started < 20  # it was names.count per host: 10^10 comparisons


# ------------------------------------------------------------------ run records

SPEC = "name: t\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\ntasks: {worker: 2}\n"
PLAN = {"name": "t", "strategy": "multi_worker_mirrored", "backend": "local", "tasks": [
    {"type": "worker", "index": 0, "host": "h0"}, {"type": "worker", "index": 1, "host": "h1"}]}
EVENTS = [{"time": 10.0, "event": "run_start"},
          {"time": 11.0, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": 0}]


def record(tmp_path: Path, events: bytes = b"", plan: bytes = b"", log: bytes = b"") -> Path:
    """A spec and a run record of it, its files as given (the defaults a plain started run's)."""
    (tmp_path / "c.yaml").write_text(SPEC)
    run = tmp_path / "runs" / "t" / "20260101-000000-abcd"
    (run / "logs").mkdir(parents=True)
    (run / "plan.json").write_bytes(plan or json.dumps(PLAN).encode())
    (run / "events.jsonl").write_bytes(events or b"".join(json.dumps(e).encode() + b"\n" for e in EVENTS))
    (run / "launcher.json").write_text(json.dumps({"pid": 0, "start_time": 1, "tasks": {}}))
    (run / "logs" / "worker-0.log").write_bytes(log)
    (run.parent / "latest").symlink_to(run.name)
    return run


def run_cli(tmp_path: Path, *args: str):
    result = tfcluster_measured(*args, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert "Traceback" not in output and not RAW_CONTROL.search(output), output[-2000:]
    assert result.cpu_s < 8 and result.peak_mb < 300, (result.cpu_s, result.peak_mb, output[-500:])
    return result


@pytest.mark.parametrize("files, problem", [
    ({"events": json.dumps(EVENTS[0]).encode() + b"\n" + b"\x1b]0;x" * 2_000_000 + b"\n"},
     "events.jsonl line 2 is not an event ('\\x1b]0;x"),
    ({"events": b'{"event": "start", "task": ["a"], "attempt": "x"}\n'},
     "events.jsonl line 1 ('start'): task: a list where text goes"),
    ({"events": b'{"event": "exit", "task": "worker:0", "code": "x"}\n'},
     "events.jsonl line 1 ('exit'): code: text 'x' where a whole number goes"),
    ({"plan": b"[" * 100_000}, "plan.json is not valid JSON (nested past Python's limit)"),
    ({"plan": b'{"tasks": 5}'}, "holds values tfcluster cannot read (TypeError"),
])
def test_a_damaged_record_is_one_line_for_status_and_runs(tmp_path, files, problem):
    record(tmp_path, **files)
    status = run_cli(tmp_path, "status", "c.yaml")
    (line,) = status.stderr.splitlines()
    assert status.returncode == 1 and line.startswith("tfcluster: error: run record damaged: ") and len(line) < 400
    assert problem in line, line
    runs = run_cli(tmp_path, "runs", "c.yaml")
    assert runs.returncode == 0 and "damaged" in runs.stdout and len(runs.stdout) < 2000, runs.stdout


def test_a_huge_events_file_is_named_not_read(tmp_path):
    run = record(tmp_path)
    with open(run / "events.jsonl", "ab") as fh:
        fh.truncate(FILE_BYTES + 1)  # sparse: no disk, the size is what counts
    status = run_cli(tmp_path, "status", "c.yaml")
    assert status.returncode == 1 and f"events.jsonl is more than {FILE_BYTES:,} bytes" in status.stderr


def test_a_log_line_of_50_mb_with_escapes_keeps_status_and_logs_small(tmp_path):
    """The log is the task's own output (``logs`` prints it as the task wrote it); the status table
    shows its last line escaped and the readers' memory stays bounded."""
    record(tmp_path, log=b"first\n" + b"\x1b[2J" + b"y" * 50_000_000 + b"\nlast \x1b]0;x\x07\n")
    status = run_cli(tmp_path, "status", "c.yaml")
    assert "last \\x1b]0;x\\x07" in status.stdout, status.stdout
    tail = tfcluster_measured("logs", "c.yaml", "worker:0", "--tail", "1", cwd=tmp_path)
    assert tail.returncode == 0 and tail.stdout == "last \x1b]0;x\x07\n" and tail.peak_mb < 300, tail.peak_mb
    two = tfcluster_measured("logs", "c.yaml", "worker:0", "--tail", "2", cwd=tmp_path)
    assert len(two.stdout) == 2**20 + len("\nlast \x1b]0;x\x07\n") and two.peak_mb < 300  # the long line cut


# ------------------------------------------------------------------ a host's replies

class FloodChannel:
    """A channel whose host answers with ``data`` repeated without end (no newline), as a host
    sending a 100 MB line does; counts what was read of it."""

    def __init__(self, data: bytes) -> None:
        self.data, self.read, self.closed = data, 0, False

    def sendall(self, data: bytes) -> None:
        pass

    def recv(self, n: int) -> bytes:
        self.read += len(self.data)
        return self.data

    def exit_status_ready(self) -> bool:
        return False


def test_a_host_that_sends_an_endless_line_is_named_and_failing():
    from launcher.backends.ssh.probe import first_exchange
    from launcher.bounded import HOST_LINE_BYTES

    chan = FloodChannel(b"\x1b[2J" + b"x" * 65532)
    tracemalloc.start()
    try:
        reply, problem = first_exchange("h7", "python3", chan, {"ports": []}, 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reply is None and problem.text == (f"host h7: the preflight agent answered a line of more than "
                                         f"{HOST_LINE_BYTES:,} bytes; the host is treated as failing: check it (is "
                                         "'python3' a plain Python 3, and does its login print nothing?)")
    assert chan.read <= HOST_LINE_BYTES + 65536 and peak < 4 * HOST_LINE_BYTES, (chan.read, peak)


@pytest.mark.parametrize("line, said", [
    (b"\x1b]0;owned\x07 hello\n", "the preflight agent answered '\\x1b]0;owned\\x07 hello', not JSON"),
    (b"[1, 2]\n", "the preflight agent answered '[1, 2]', not a JSON object"),
    (b"[" * 100_000 + b"\n", "the preflight agent answered '" + "[" * 80 + "...' (100,000 bytes), not JSON"),
    (b'{"python": "3.11.7", "deps": [], "ports": {}}\n',
     "the preflight agent answered {'python': '3.11.7', 'deps': [], 'ports': {}}, not the preflight agent's reply"),
])
def test_garbage_from_a_host_is_one_line_naming_it(line, said):
    from launcher.backends.ssh.probe import first_exchange

    class Chan(FloodChannel):
        def recv(self, n: int) -> bytes:
            data, self.data = self.data, b""
            return data

    reply, said_back = first_exchange("h7", "python3", Chan(line), {"ports": []}, 60)
    problem = said_back.text
    assert reply is None and problem.startswith(f"host h7: {said}; the host is treated as failing"), problem
    assert not RAW_CONTROL.search(problem) and len(problem) < 400


def test_the_gce_metadata_reply_is_read_only_as_far_as_the_flag(tmp_path):
    """A metadata server (a real one on localhost, of the test's own) that answers 50 MB: the
    watcher reads the flag's few bytes, and still sees TRUE when it comes."""
    import http.server
    import threading

    from launcher.remote.gcewatch import watch as _watch_gce

    answers = [b"FALSE" + b" " * 50_000_000, b"TRUE"]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = answers.pop(0) if len(answers) > 1 else answers[0]
            self.send_response(200)
            self.send_header("ETag", f"e{len(answers)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # the watcher read its bytes and closed
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    noticed, stopping = threading.Event(), threading.Event()
    tracemalloc.start()
    try:
        watcher = threading.Thread(target=_watch_gce, args=(f"127.0.0.1:{server.server_port}", noticed.set, stopping))
        watcher.start()
        assert noticed.wait(30), "the TRUE after a 50 MB reply was not seen within 30 s"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        stopping.set()
        server.shutdown()
    assert peak < 10 * 2**20, peak


def test_a_task_output_line_of_100_mb_is_shown_in_pieces_and_memory_stays_bounded():
    """A task on a host that prints 100 MB without a newline: the launcher's reader passes it on
    in pieces of at most HOST_LINE_BYTES (and a bit) instead of holding it whole."""
    from types import SimpleNamespace

    from launcher.backends.base import OutputSink
    from launcher.backends.ssh.task import SSHTask
    from launcher.bounded import HOST_LINE_BYTES
    from launcher.plan.build import PlannedTask

    class Chan:
        def __init__(self) -> None:
            self.left, self.exit_status, self.closed = 100_000_000, 0, False

        def recv(self, n: int) -> bytes:
            if self.left <= 0:
                return b""
            self.left -= 65536
            return b"z" * 65536 if self.left > 0 else b"z\nlast\n"

        def exit_status_ready(self) -> bool:
            return self.left <= 0

        def close(self) -> None:
            self.closed = True

    sizes: list[int] = []
    pool = SimpleNamespace(heartbeat=SimpleNamespace(silence=lambda host: 0.0), opts=SimpleNamespace(lease=3))
    planned = PlannedTask(type="worker", index=0, host="h1", address="h1", port=1, command=("true",))
    tracemalloc.start()
    try:
        task = SSHTask(planned, pool, SimpleNamespace(name="h1", transport=None), Chan(), "pidfile",
                       OutputSink(lambda key, line: sizes.append(len(line)), lambda key, line: None))
        task._reader.join(60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not task._reader.is_alive(), "the reader did not get through 100 MB within 60 s"
    assert sum(sizes) == 1525 * 65536 + len("z") + len("last")  # every byte passed on: 1,525 full chunks, then "z\nlast\n"
    assert max(sizes) <= HOST_LINE_BYTES + 65536 and sizes[-1] == 4, sizes[-3:]
    assert peak < 8 * HOST_LINE_BYTES, peak
