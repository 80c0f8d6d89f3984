"""Property-based tests (Hypothesis) of the loaders of outside bytes: whatever the input, the outcome
is a value or one bounded error (lines of bounded length, no raw control character), never another
exception, within a time bound.

- the spec loader: any bytes; any YAML that PyYAML can write (so can parse); any mapping of the
  spec's keys with values of the wrong types. The outcome is a plan, or SpecError lines;
- the discovery-output parser (launcher/loader/discovery.py): a host list or one DiscoveryError line;
- the run record's reader (launcher/record/reader.py and status.py): whatever the files hold.

A bounded number of examples, derandomized (the same examples every run: a CI run does not fail on
an example it drew by chance once); ``TFCLUSTER_FUZZ_EXAMPLES=N`` runs N of each instead, with a
random seed (``bench/fuzz_inputs.py`` does, for a longer run on demand).
"""

from __future__ import annotations

import json
import os
import re
import time

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.loader.discovery import DiscoveryError, parse_hosts
from launcher.errors import SpecError
from launcher.app.up import plan_for
from launcher.record.status import RecordDamaged, load_run
from launcher.ui.runstatus import render_runs, render_status
from launcher.loader.load import Host, parse_spec

_LONG = os.environ.get("TFCLUSTER_FUZZ_EXAMPLES")
SETTINGS = settings(
    max_examples=int(_LONG) if _LONG else 40,
    derandomize=not _LONG,
    deadline=None,  # the time bound is asserted per example below, generous for a loaded machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None,
)
SECONDS = 10.0  # per example: they take milliseconds; this catches the hang, not a slow machine
LINE_CHARS = 700  # a spec error line: where, the field, a value shown shortened, the fix
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

# Text as outside input has it: control characters, escapes, other scripts; no lone surrogates
# (YAML cannot hold them; the any-bytes test covers what a file can).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True), TEXT, st.sampled_from(["all", "auto", "local", "ssh", "chief", "1e9",
                                                                    "-1", "0", "worker", "h1", "x" * 200]))
ANY = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                   st.dictionaries(st.one_of(TEXT, st.integers()), inner, max_size=5)),
                   max_leaves=20)
SPEC_KEYS = ["name", "strategy", "backend", "entrypoint", "hosts", "tasks", "ports", "env", "restart", "elastic",
             "discovery", "watchdog", "state", "run_dir", "workdir", "devices", "tpu", "ssh", "docker", "slurm",
             "kubernetes", "vertex"]
GOOD = {"name": "x", "strategy": "multi_worker_mirrored", "entrypoint": "python -m worker", "tasks": {"worker": 2}}
SUBKEYS = {"tasks": ["chief", "worker", "ps", "evaluator"], "restart": ["max_restarts", "backoff", "permanent_exit_codes"],
           "devices": ["gpus", "cpus", "threads"], "ports": ["base"], "watchdog": ["startup_timeout", "hang_timeout"],
           "state": ["dir", "sync", "fetch"], "ssh": ["remote_dir", "python", "lease"], "hosts": ["name", "ssh", "port"]}


def check_outcome(run) -> None:
    """``run()`` parses and plans: a plan, or SpecError lines that are each bounded and safe."""
    start = time.monotonic()
    try:
        run()
    except SpecError as exc:
        assert 1 <= len(exc.lines) <= 21, exc.lines
        for line in exc.lines:
            assert len(line) <= LINE_CHARS, line[:2000]
            assert not RAW_CONTROL.search(line), repr(line)
    assert time.monotonic() - start < SECONDS


def plan_of(text: str) -> None:
    plan_for(parse_spec(text, "c.yaml"))


@SETTINGS
@given(st.binary(max_size=2000))
def test_any_bytes(data):
    def run():
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", "surrogateescape")  # lone surrogates: what a str can hold and YAML cannot
        plan_of(text)
    check_outcome(run)


@SETTINGS
@given(st.one_of(ANY, st.dictionaries(st.sampled_from(SPEC_KEYS), ANY, max_size=8)))
def test_any_yaml_pyyaml_can_write(data):
    text = yaml.safe_dump(data, allow_unicode=True)
    check_outcome(lambda: plan_of(text))


@st.composite
def spec_with_wrong_types(draw):
    """A valid spec, then some of its keys (and of their blocks' keys) given values of any type."""
    spec = dict(GOOD)
    for key in draw(st.lists(st.sampled_from(SPEC_KEYS), max_size=4, unique=True)):
        if key in SUBKEYS and draw(st.booleans()):
            block = {sub: draw(ANY) for sub in draw(st.lists(st.sampled_from(SUBKEYS[key]), min_size=1, unique=True))}
            spec[key] = [block] if key == "hosts" else block
        else:
            spec[key] = draw(ANY)
    return spec


@SETTINGS
@given(spec_with_wrong_types())
def test_the_specs_keys_with_values_of_any_type(spec):
    text = yaml.safe_dump(spec, allow_unicode=True)
    check_outcome(lambda: plan_of(text))


@SETTINGS
@given(st.lists(st.sampled_from(["[", "]", "{", "}", "&a ", "*a", "&b ", "*b", ", ", ": ", "- ", "\n", "  ", "x",
                                  "name: x\n", "'", '"', "\\x1b", "<<: ", "!!str ", "!!int ", "---\n"]), max_size=60))
def test_yaml_shaped_noise(parts):
    """Fragments of YAML's syntax in any order: anchors and aliases, brackets, merge keys, tags."""
    check_outcome(lambda: plan_of("".join(parts)))


# ------------------------------------------------------------------ discovery output

HOSTISH = st.one_of(TEXT, st.sampled_from(["vm1 10.0.0.1\n", "vm2 10.0.0.2 me@vm2\n", "# c\n", "- {name: a}\n",
                                           '[{"name": "b"}]', "hosts: [{name: c}]\n", "{", "[", "-", "&a", "*a"]))


@SETTINGS
@given(st.one_of(st.lists(HOSTISH, max_size=20).map("".join), st.builds(json.dumps, ANY),
                 st.builds(lambda d: yaml.safe_dump(d, allow_unicode=True), ANY)))
def test_discovery_output_is_a_host_list_or_one_bounded_line(text):
    start = time.monotonic()
    try:
        hosts = parse_hosts(text)
    except DiscoveryError as exc:
        line = str(exc)
        assert "\n" not in line and len(line) <= 400 and not RAW_CONTROL.search(line), repr(line)
    else:
        assert all(isinstance(h, Host) for h in hosts)
    assert time.monotonic() - start < SECONDS


# ------------------------------------------------------------------ run records

RECORD_FILES = st.fixed_dictionaries({
    "plan.json": st.one_of(st.builds(json.dumps, ANY), st.binary(max_size=200),
                           st.builds(lambda tasks: json.dumps({"name": "t", "backend": "local", "tasks": tasks}),
                                     st.lists(st.one_of(ANY, st.fixed_dictionaries(
                                         {"type": st.sampled_from(["worker", "chief"]), "index": ANY, "host": ANY})),
                                         max_size=3))),
    "events.jsonl": st.lists(st.one_of(st.binary(max_size=60), st.builds(lambda e: json.dumps(e).encode(), ANY),
                                       st.builds(lambda e: json.dumps(e).encode(), st.fixed_dictionaries(
                                           {"event": st.sampled_from(["run_start", "start", "ready", "exit", "stopped",
                                                                      "outcome", "restart", "attempt_ready"]),
                                            "task": st.one_of(st.just("worker:0"), ANY), "attempt": ANY,
                                            "code": ANY, "log_offset": ANY, "time": ANY}))),
                             max_size=8).map(lambda lines: b"".join(line + b"\n" for line in lines)),
    "launcher.json": st.one_of(st.builds(json.dumps, ANY), st.binary(max_size=100)),
    "logs/worker-0.log": st.binary(max_size=300),
    "snapshot.json": st.one_of(st.just(None), st.builds(json.dumps, ANY)),
})


@SETTINGS
@given(RECORD_FILES)
def test_a_run_record_reads_as_a_status_or_one_bounded_line(tmp_path_factory, files):
    """Whatever its files hold, ``load_run`` (status, runs, logs, attach) gives a status or
    RecordDamaged's one line."""
    run = tmp_path_factory.mktemp("rec") / "t" / "20260101-000000-abcd"
    (run / "logs").mkdir(parents=True)
    for name, data in files.items():
        if data is not None:
            (run / name).write_bytes(data.encode() if isinstance(data, str) else data)
    start = time.monotonic()
    try:
        status = load_run(run, alive=lambda pid, st: False, group_alive=lambda pgid: False)
    except RecordDamaged as exc:
        (line,) = exc.lines
        assert len(line) <= 600 and not RAW_CONTROL.search(line), repr(line)
    else:  # what status, status --json and runs print
        json.dumps(status.to_json())
        lines = render_status(status, "c.yaml") + render_runs([status], run.parent)
        assert all(isinstance(line, str) for line in lines)
    assert time.monotonic() - start < SECONDS
