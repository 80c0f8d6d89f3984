"""launcher/loader/discovery.py: the host list a discovery command prints, and what a failing, hanging or
garbage-printing command does (one line, nothing changed, nothing left running)."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from launcher.loader.discovery import DiscoveryError, Poller, parse_hosts, run_discovery, with_discovered
from launcher.errors import SpecError
from launcher.loader.load import load_spec


def names(hosts):
    return [(h.name, h.address, h.ssh) for h in hosts]


def test_plain_lines_yaml_and_json_lists_give_the_same_hosts():
    lines = "# name address ssh\nvm1 10.0.0.2\nvm2 10.0.0.3 me@vm2.example\n\n"
    yaml_list = "- {name: vm1, address: 10.0.0.2}\n- {name: vm2, address: 10.0.0.3, ssh: me@vm2.example}\n"
    json_list = '[{"name": "vm1", "address": "10.0.0.2"}, {"name": "vm2", "address": "10.0.0.3", "ssh": "me@vm2.example"}]'
    wrapped = '{"hosts": ' + json_list + "}"
    want = [("vm1", "10.0.0.2", None), ("vm2", "10.0.0.3", "me@vm2.example")]
    for text in (lines, yaml_list, json_list, wrapped):
        assert names(parse_hosts(text)) == want, text
    assert parse_hosts("") == [] and parse_hosts("  \n") == []  # every host gone


@pytest.mark.parametrize("text,problem", [
    ("vm1 a b c\n", "line 1 of the output has 4 fields: 'vm1 a b c'; print 'name address [ssh-target]' per line, "
                    "or a YAML/JSON list"),
    ('[{"name": "vm1"}, 3]', "host 2 of the output is 3, not a mapping with name (and ssh, address)"),
    ('[{"name": "vm 1"}]', "host 1 of the output: name: Value error, 'vm 1' is not a valid host name; use letters, "
                           "digits, '.', '_' or '-'"),
    ('[{"name": "vm1", "colour": "red"}]', "host 1 of the output: colour: Extra inputs are not permitted"),
    ("vm1 a\nvm1 b\n", "host vm1 is listed twice in the output"),
    ('{"error": "quota"}', "output is a dict, not a list of hosts"),
    ('"just a string"', "host 1 of the output: name: Value error, '\"just' is not a valid host name; use letters, "
                         "digits, '.', '_' or '-'"),
])
def test_output_that_is_not_a_host_list_is_one_line(text, problem):
    with pytest.raises(DiscoveryError) as err:
        parse_hosts(text)
    assert str(err.value) == problem


def test_a_failing_or_hanging_command_is_one_line_and_a_hung_one_is_killed_whole(tmp_path):
    with pytest.raises(DiscoveryError) as err:
        run_discovery("echo 'gcloud: not logged in' >&2; exit 3", 5, tmp_path)
    assert str(err.value) == "exited with 3: gcloud: not logged in"
    marker = tmp_path / "still-running"
    started = time.monotonic()
    with pytest.raises(DiscoveryError) as err:
        run_discovery(f"(sleep 3; touch {marker}) & sleep 30", 0.5, tmp_path)
    assert str(err.value) == "no answer within 0.5 s (discovery.timeout); the command was stopped"
    assert time.monotonic() - started < 10
    # The command's whole process group was killed: its background child never touches the marker.
    with pytest.raises(DiscoveryError):
        run_discovery("sleep 4", 3.5, tmp_path)  # outlasts the killed child's 3 s
    assert not marker.exists()
    assert names(run_discovery("printf 'vm1 10.0.0.2\\n'", 5, tmp_path)) == [("vm1", "10.0.0.2", None)]


SPEC = """\
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts: [{{name: h1, address: 10.0.0.1}}]
discovery:
  command: {command}
tasks: {{worker: 2}}
"""


def test_plan_time_discovery_adds_the_hosts_or_fails_in_one_line_naming_the_command(tmp_path):
    (tmp_path / "hosts.txt").write_text("h2 10.0.0.2\nh3 10.0.0.3\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(SPEC.format(command="cat hosts.txt"))
    loaded = with_discovered(load_spec(path))
    assert [h.name for h in loaded.spec.hosts] == ["h1", "h2", "h3"]
    (tmp_path / "hosts.txt").write_text("h1 10.9.9.9\n")  # a name of hosts: keeps its entry
    assert [(h.name, h.address) for h in with_discovered(load_spec(path)).spec.hosts] == [("h1", "10.0.0.1")]
    path.write_text(SPEC.format(command="'echo nope >&2; exit 4'"))
    with pytest.raises(SpecError) as err:
        with_discovered(load_spec(path))
    assert err.value.lines == (f"{path}:7: discovery.command: exited with 4: nope; fix the command (it must print "
                               "the hosts that exist now) or list hosts under hosts:",)


def test_discovery_is_refused_on_backends_whose_hosts_cannot_come_and_go(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent("""\
        name: t
        strategy: multi_worker_mirrored
        entrypoint: python -m worker
        discovery: {command: cat hosts.txt}
        tasks: {worker: 2}
        """))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.lines == (f"{path}:4: discovery: backend local cannot use hosts that come and go; discovery: "
                               "works with backend ssh; remove discovery:",)


def test_the_poller_keeps_every_answer_good_or_not(tmp_path):
    answers = iter([["h1"], DiscoveryError("exited with 1"), ["h1", "h2"]])

    def run(command, timeout, cwd):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        from launcher.loader.load import Host
        return [Host(name=n) for n in a]

    poller = Poller("x", 0.01, 1, tmp_path, run=run).start()
    seen = []
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        count, answer = poller.latest()
        if answer is not None and (not seen or seen[-1][0] != count):
            seen.append((count, None if answer.hosts is None else [h.name for h in answer.hosts], answer.problem))
        time.sleep(0.001)
    poller.close()
    assert [s[1:] for s in seen[:3]] == [(["h1"], ""), (None, "exited with 1"), (["h1", "h2"], "")], seen
