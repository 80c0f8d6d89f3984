"""Hostile and malformed specs stay small: each case is ``tfcluster validate``/``plan`` in a
subprocess, which must end with exit 2, a few short lines, no traceback and no raw control
character, within CPU and memory bounds measured on the child itself (os.wait4). Before these
bounds: the billion laughs took 21 s, 3.6 GB and printed a 1 GB line; ``worker: 100000000`` 11 GB;
20,000 nested brackets a 3,000-line traceback; an escape sequence in a key reached the terminal raw.
"""

from __future__ import annotations

import re

import pytest

from launcher.spec.load import ARG_STRLEN, ARG_TOTAL, SPEC_BYTES, SPEC_DEPTH, SPEC_ITEMS, SPEC_TASKS, SPEC_VALUES
from tests.support.cli import tfcluster_measured

HEAD = "name: x\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\n"
TASKS = "tasks: {worker: 1}\n"
# Python's start and tfcluster's imports are most of it (about 0.3 s of CPU, 60 MB); the bounds
# leave room for a loaded machine and a slower one, and are far below what the cases cost before.
CPU_S = 4.0
PEAK_MB = 300.0
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def refused(tmp_path, text, *, command="validate", name="c.yaml", max_lines=3):
    """Run ``tfcluster COMMAND`` on ``text`` (str or bytes) and check the refusal's shape; its lines."""
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    run = tfcluster_measured(command, name, cwd=tmp_path)
    output = run.stdout + run.stderr
    assert run.returncode == 2, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    assert not RAW_CONTROL.search(output), repr(output[:500])
    lines = run.stderr.splitlines()
    assert 1 <= len(lines) <= max_lines and not run.stdout, output[-2000:]
    assert all(line.startswith("tfcluster: error: ") and len(line) <= 400 for line in lines), lines
    assert run.cpu_s < CPU_S and run.peak_mb < PEAK_MB, (run.cpu_s, run.peak_mb, lines)
    return lines


def laughs(levels: int, where: str) -> str:
    """The "billion laughs": nine of the level below at each of ``levels`` levels, ``where`` the
    last anchor is used (a 1 KB file)."""
    anchors = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        anchors.append(f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "x-defs:\n" + "".join(f"  - {a}\n" for a in anchors) + where.replace("ALIAS", f"*a{levels - 1}")


def test_the_billion_laughs_is_refused_before_it_expands(tmp_path):
    text = laughs(8, "name: ALIAS\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\n" + TASKS)
    assert len(text) < 1024
    (line,) = refused(tmp_path, text)
    assert f"c.yaml:8: aliases (*name) expand it to more than {SPEC_VALUES:,} values" in line, line


def test_aliases_an_honest_spec_uses_still_work(tmp_path):
    """Anchors for shared values, merge keys included, are not what the bound is about."""
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + TASKS + "ssh: {remote_dir: &d /tmp/x}\nbackend: ssh\nworkdir: *d\nhosts:\n"
                    "  - &h {name: h0, user: me, port: 2222}\n"
                    + "".join(f"  - {{<<: *h, name: h{i}}}\n" for i in range(1, 200)))
    run = tfcluster_measured("plan", path)
    assert run.returncode == 0, run.stderr
    assert "me@h199:2222" in run.stdout or "h199" in run.stdout, run.stdout[:2000]
    path.write_text(HEAD + TASKS + "env: {A: &v hello, B: *v}\nrestart: {max_restarts: &n 2}\nports: {base: 3000}\n"
                    "watchdog: {hang_timeout: *n}\n")
    run = tfcluster_measured("plan", path)
    assert run.returncode == 0, run.stderr
    assert "A=hello" in run.stdout and "B=hello" in run.stdout


def test_an_alias_inside_what_it_names_is_refused(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + "env: &e {A: *e}\n")
    assert "c.yaml:5: the alias *e refers to the list or mapping that holds it" in line, line


def test_a_5_mb_value_is_refused_by_the_file_size(tmp_path):
    (line,) = refused(tmp_path, HEAD.replace("python -m worker", "python " + "x" * 5_000_000) + TASKS)
    assert f"the file is 5,000,0" in line and f"above the bound of {SPEC_BYTES:,} bytes (1 MiB)" in line, line


def test_a_string_past_the_kernels_argument_bound_is_refused_where_it_is(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + f"env: {{A: {'y' * 900_000}}}\n")
    assert f"c.yaml:5: a string of 900,000 characters, above the bound of {ARG_STRLEN:,}" in line, line


def test_an_entrypoint_past_one_arguments_bound_is_refused(tmp_path):
    """Bytes, not characters: 70,000 characters of two bytes each pass the bound on a string's length."""
    (line,) = refused(tmp_path, HEAD.replace("python -m worker", "python " + "\u00e9" * 70_000) + TASKS)
    assert line.endswith(f"c.yaml:3: entrypoint: {140_007:,} bytes, above the kernel's bound of "
                         f"{ARG_STRLEN:,} bytes for one argument (MAX_ARG_STRLEN); put long input in a file the "
                         "command reads"), line


def test_argv_and_env_together_past_the_bound_are_refused(tmp_path):
    """Each value under the one-argument bound, ten of them (one string, aliased) past ARG_TOTAL."""
    env = ", ".join(f"A{i}: *v" for i in range(10))
    (line,) = refused(tmp_path, HEAD + TASKS + f"x-v: &v {'z' * 120_000}\nenv: {{{env}}}\n".replace("x-v", "workdir"))
    assert f"env: the command line and env: together are 1,200,0" in line and f"{ARG_TOTAL:,}" in line, line


def test_a_nul_in_a_variable_is_refused(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + 'env: {A: "a\\0b"}\n')
    assert line.endswith("c.yaml:5: env.A: holds a NUL character (\\x00), which no environment can carry; "
                         "remove it"), line


@pytest.mark.parametrize("count, problem", [
    ("100000000", f"tasks.worker: 100,000,000 tasks, above the bound of {SPEC_TASKS:,} tasks"),
    ("{count: 100000000}", f"tasks.worker: 100,000,000 tasks, above the bound of {SPEC_TASKS:,} tasks"),
])
def test_a_huge_task_count_is_refused_before_it_is_planned(tmp_path, count, problem):
    (line,) = refused(tmp_path, HEAD + f"tasks: {{worker: {count}}}\n", command="plan")
    assert f"c.yaml:4: {problem}" in line, line


def test_task_counts_are_bounded_in_all_too(tmp_path):
    (line,) = refused(tmp_path, HEAD + "tasks: {chief: 1, worker: 100000}\n")
    assert f"tasks: 100,001 tasks in all, above the bound of {SPEC_TASKS:,}" in line, line


def test_20000_nested_brackets_are_one_line_not_a_recursion_error(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + "env: " + "[" * 20_000 + "]" * 20_000 + "\n")
    assert f"c.yaml:5: lists and mappings nested more than {SPEC_DEPTH} deep" in line, line


def test_a_list_past_the_entries_bound_is_refused(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + "restart: {permanent_exit_codes: [" + "1," * SPEC_ITEMS + "1]}\n")
    assert f"a list or mapping of more than {SPEC_ITEMS:,} entries" in line, line


def test_escape_characters_in_a_key_are_shown_escaped(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + '"\\x1b]0;pwned\\x07": 1\n')
    assert "c.yaml:5:" in line and "unknown key '\\x1b]0;pwned\\x07'" in line, line


def test_escape_characters_in_name_are_shown_escaped(tmp_path):
    (line,) = refused(tmp_path, HEAD.replace("name: x", 'name: "a\\x1b[31mred\\x9b2J"') + TASKS)
    assert line == ("tfcluster: error: c.yaml:1: name: 'a\\x1b[31mred\\x9b2J' is not a valid run name; use letters, "
                    "digits, '.', '_' or '-' (it names files and containers)"), line


def test_a_raw_escape_byte_in_the_file_is_one_line(tmp_path):
    (line,) = refused(tmp_path, HEAD + TASKS + "\x1b]0;pwned\x07: 1\n")
    assert "c.yaml:5: YAML syntax error: character '\\x1b' is not allowed in YAML" in line, line


def test_a_long_value_is_shown_shortened(tmp_path):
    (line,) = refused(tmp_path, HEAD.replace("name: x", "name: " + "n" * 100_000) + TASKS)
    assert f"name: '{'n' * 60}...' (100,000 characters) is not a valid run name" in line, line


def test_20000_hosts_and_one_undefined_name_is_a_short_line(tmp_path):
    hosts = "".join(f"  - {{name: h{i}}}\n" for i in range(20_000))
    (line,) = refused(tmp_path, HEAD + "backend: ssh\nhosts:\n" + hosts + "tasks: {worker: {count: 1, hosts: [h20000]}}\n")
    assert line.endswith("tasks.worker.hosts[0]: unknown host 'h20000' (did you mean 'h2000'?); defined hosts: "
                         "h0, h1, h2, h3, h4, h5, h6, h7, h8, h9, ... (20,000 hosts)"), line


def test_many_problems_are_20_lines_and_a_count(tmp_path):
    hosts = "".join(f"  - {{name: 'bad name {i}'}}\n" for i in range(5_000))
    lines = refused(tmp_path, HEAD + TASKS + "backend: ssh\nhosts:\n" + hosts, max_lines=21)
    assert len(lines) == 21 and lines[-1] == "tfcluster: error: c.yaml: 4,980 more problems not shown; fix the ones above first"


@pytest.mark.parametrize("text, problem", [
    (b"name: \xff\xfe\n", "c.yaml:1: the file is not UTF-8 text (byte 0xff at offset 6); save it as UTF-8"),
    ("? [a, b]\n: 1\n", "c.yaml:1: YAML syntax error: a key is a list; keys are names (strings)"),
    ("ports: {base: " + "9" * 5000 + "}\n", "c.yaml:1: YAML syntax error: this value cannot be read (ValueError: "
                                            "Exceeds the limit (4300 digits)"),
    ("name: x\n---\nname: y\n", "c.yaml:2: YAML syntax error: a second YAML document (after ---)"),
])
def test_what_pyyaml_or_python_cannot_take_is_one_line(tmp_path, text, problem):
    (line,) = refused(tmp_path, text)
    assert problem in line, line


def test_aliases_count_as_the_values_they_expand_to():
    """``a: &x [1, 2, 3]`` and ``b: [*x, *x]``: the mapping, 2 keys, x (4 values) and b (1 + 4 + 4): 16."""
    import yaml

    from launcher.spec.load import YAMLBoundError, YAMLBounds, compose_bounded

    text = "a: &x [1, 2, 3]\nb: [*x, *x]\n"
    root = compose_bounded(text, yaml.SafeLoader, YAMLBounds(values=16))
    assert root.value[1][1].value[0] is root.value[0][1]  # the alias is the anchored node, not a copy
    with pytest.raises(YAMLBoundError) as err:
        compose_bounded(text, yaml.SafeLoader, YAMLBounds(values=15))
    assert err.value.mark.line == 1 and "more than 15 values" in err.value.message


def test_plan_shows_a_specs_escape_sequences_escaped(tmp_path):
    """An env value may hold anything (it is valid); the text plan shows it escaped, --json as JSON does."""
    (tmp_path / "c.yaml").write_text(HEAD + TASKS + 'env: {TITLE: "\\x1b]0;owned\\x07", CLEAR: "\\x1b[2J"}\n')
    run = tfcluster_measured("plan", "c.yaml", cwd=tmp_path)
    assert run.returncode == 0 and not RAW_CONTROL.search(run.stdout + run.stderr), repr(run.stdout)
    assert "TITLE=\\x1b]0;owned\\x07" in run.stdout and "CLEAR=\\x1b[2J" in run.stdout
