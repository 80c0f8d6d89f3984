"""The generated reference of the docs site (docs/reference/) is what the code says today: it is
regenerated into a temporary directory and compared with the committed pages."""

from __future__ import annotations

import difflib

from launcher.cli import docsgen
from tests.support.cli import ROOT

REFRESH = "docs/reference is stale: run `python -m launcher.cli.docsgen` and commit docs/reference/"


def test_the_generated_reference_is_fresh(tmp_path):
    written = {p.name for p in docsgen.write(tmp_path)}
    committed = {p.name for p in (ROOT / "docs" / "reference").iterdir()}
    assert committed == written, f"{REFRESH} (files: committed {sorted(committed)}, generated {sorted(written)})"
    stale = []
    for name in sorted(written):
        new, old = (tmp_path / name).read_text(), (ROOT / "docs" / "reference" / name).read_text()
        if new != old:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"committed/{name}", f"generated/{name}",
                                        lineterm="", n=0)
            stale.append("\n".join(list(diff)[:12]))
    assert not stale, REFRESH + "\n" + "\n".join(stale)


def test_the_reference_covers_every_key_flag_variable_and_exit_code():
    from launcher import errors
    from launcher.contract import envnames
    from launcher.cli.parser import build_parser
    from launcher.loader.load import spec_model

    pages = docsgen.pages()
    spec = pages["spec.md"]
    for name, field in spec_model().model_fields.items():  # every top-level key, nested ones below
        assert f"| `{name}` |" in spec, name
    for key in ("gpus_per_task", "connect_timeout", "setup_timeout", "warm_standby", "max_host_losses"):
        assert f"| `{key}` |" in spec, key
    cli = pages["cli.md"]
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():
        assert f"## tfcluster {name}\n" in cli, name
        for action in command._actions:
            if action.option_strings and action.help != "==SUPPRESS==":
                assert f"`{action.option_strings[-1]}`" in cli, (name, action.option_strings)
    env = pages["env.md"]
    for value in (v for k, v in vars(envnames).items() if k.isupper()):
        assert f"| `{value}` | " in env and f"| `{value}` |  |" not in env, value  # listed, and described
    codes = pages["exit-codes.md"]
    for name in (k for k in vars(errors) if k.startswith("EXIT_")):
        assert f"| {getattr(errors, name)} | `{name}` | " in codes, name
