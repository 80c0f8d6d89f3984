"""README.md is the front page: at most about 200 lines, and every command it shows is run by a
test (here, or by the test named for it), so none of them can rot."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.support.readme import README, fenced_blocks
from tests.support.cli import ROOT, tfcluster

# Commands of the README that a heavier test runs, and the text in that test that shows it does.
RUN_ELSEWHERE = {
    # the demo, from the wheel in a fresh virtualenv, in a directory with its own worker.py
    "tfcluster up": ("tests/integration/test_wheel.py", '[bindir / "tfcluster", "up"'),
    # the suite's own installer installs the project editable with every extra, [tf] among them
    'pip install -e ".[tf]"': ("tests/run.sh", '-e ".[tf,'),
    # the suite itself (CI runs it)
    "bash tests/run.sh": ("tests/run.sh", "python -m pytest"),
}
RUN_HERE = ("validate", "plan", "schema")


def _commands() -> list[str]:
    out = []
    for _, text in fenced_blocks(README, "sh"):
        out += [line.split("  #")[0].strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return out


def test_the_readme_fits_a_few_screens():
    assert len(README.read_text().splitlines()) <= 200


def test_every_command_of_the_readme_is_run_by_a_test(tmp_path: Path):
    commands = _commands()
    assert "tfcluster up" in commands and len(commands) >= 5, commands
    # The commands run from the demo's directory: its cluster.yaml is the default FILE.
    (tmp_path / "cluster.yaml").write_text((ROOT / "cluster.yaml").read_text())
    not_run = []
    for command in commands:
        if command in RUN_ELSEWHERE:
            path, evidence = RUN_ELSEWHERE[command]
            assert evidence in (ROOT / path).read_text(), f"{command}: {path} no longer runs it"
            continue
        words = shlex.split(command)
        if words[0] != "tfcluster" or words[1] not in RUN_HERE:
            not_run.append(command)
            continue
        target = words.index(">") if ">" in words else len(words)
        result = tfcluster(*words[1:target], cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr)
        if target < len(words):  # `> FILE`: what the README says the output is for
            (tmp_path / words[target + 1]).write_text(result.stdout)
    assert not not_run, f"README commands no test runs: {not_run}; run them here (RUN_HERE) or name the test"
    schema = json.loads((tmp_path / "cluster.schema.json").read_text())
    assert schema == json.loads((ROOT / "docs" / "reference" / "cluster.schema.json").read_text())


def test_the_readme_links_into_the_docs_resolve():
    import re

    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10, links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
