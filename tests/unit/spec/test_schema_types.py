"""One verdict on every field's value from the editor and from `tfcluster validate`: for every key of
cluster.yaml that `tfcluster schema` describes, a value the loader accepts the schema accepts, and a
value the schema accepts the loader accepts, unless one of the rules the schema cannot see
(``SCHEMA_BLIND`` of launcher/loader/rules.py, each with its reason) refuses it. The values are the
scalar mistakes a person makes: strings for numbers ('120', '1e3'), booleans for numbers and numbers
for booleans, fractions for counts, empty strings (docs/concepts/spec.md, "Types")."""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import SpecError
from launcher.loader.load import json_schema, parse_spec
from launcher.loader.rules import SCHEMA_BLIND
from tests.support.cli import ROOT

SCHEMA = json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
BASE = {"name": "types", "strategy": "multi_worker_mirrored", "entrypoint": "tfcluster-worker",
        "tasks": {"worker": {"count": 2}}}
# The block a key belongs to picks the backend it is read for (and an ssh spec has hosts).
BACKEND_OF = {"hosts": "ssh", "ssh": "ssh", "elastic": "ssh", "discovery": "ssh", "state": "ssh",
              "docker": "docker", "slurm": "slurm"}


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rpartition("/")[2]]
    return node


def _fields(node: dict, path: tuple) -> list[tuple]:
    """Every key the schema describes, as a path (``0``: the first item of a list of mappings), the
    blocks themselves too (``tasks.worker``, ``env``, ``docker.build``: a value in place of a block)."""
    node = _resolve(node)
    out = [path] if path else []
    for sub in [_resolve(s) for s in node.get("anyOf", [])] or [node]:
        for key, value in (sub.get("properties") or {}).items():
            out += _fields(value, path + (key,))
        items = sub.get("items")
        if sub.get("type") == "array" and isinstance(items, dict) and _resolve(items).get("properties"):
            out += _fields(items, path + (0,))
    return out


FIELDS = sorted(set(_fields(SCHEMA, ())), key=str)


def spec_for(path: tuple, value) -> dict:
    """BASE (for the backend that reads the key) with ``value`` at ``path``."""
    spec = copy.deepcopy(BASE)
    backend = BACKEND_OF.get(path[0])
    if backend:
        spec["backend"] = backend
    if backend == "ssh":
        spec["hosts"] = [{"name": "h1"}, {"name": "h2"}]
    if path[0] == "discovery" and len(path) > 1:
        spec["discovery"] = {"command": "true"}
    node = spec
    for key in path[:-1]:
        if isinstance(key, int):
            node = node[key]
        else:
            node = node.setdefault(key, {}) if isinstance(node.get(key), (dict, list)) or key not in node \
                else node.__setitem__(key, {}) or node[key]
    node[path[-1]] = value
    return spec


# The scalar mistakes, and values of each kind a field takes.
STRINGS = ["", " ", "0", "2", "120", "1e3", "2.0", "-1", "true", "yes", "on", "off", "auto", "all", "growth",
           "none", "x", "1g", "512m", "gs://b/o", "-x", "--mem=0", "a@b", "./d:/d", "02:00:00", "h1", "8Gi",
           "tfcluster-worker", "''", "missing", "ring", "model", "copy"]
SCALARS = [None, True, False, 0, 1, 2, -1, 22, 65535, 65536, 2.0, 2.5, 0.5, 1e3, -0.5, *STRINGS]
VALUES = st.one_of(st.sampled_from(SCALARS), st.integers(-3, 70000),
                   st.floats(allow_nan=False, allow_infinity=False, width=32),
                   st.lists(st.sampled_from([0, 1, 2, 2.0, 23456, "h1", "", "x", True, "-x"]), max_size=3),
                   st.dictionaries(st.sampled_from(["count", "A", "x"]), st.sampled_from([1, 2, "1", ""]), max_size=2))


def _verdicts(spec: dict) -> tuple[str | None, list[str]]:
    try:
        parse_spec(yaml.safe_dump(spec), "c.yaml")
        loader = None
    except SpecError as exc:
        loader = str(exc)
    schema = [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:120]}" for e in VALIDATOR.iter_errors(spec)]
    return loader, schema


def _blind_rule(message: str) -> str | None:
    return next((name for name, pattern, _ in SCHEMA_BLIND if re.search(pattern, message)), None)


def _check(path: tuple, value) -> None:
    spec = spec_for(path, value)
    loader, schema = _verdicts(spec)
    if loader is None:
        assert schema == [], f"the loader accepts {json.dumps(spec)}, the schema does not: {schema}"
    elif not schema:
        assert _blind_rule(loader), (f"the schema accepts {json.dumps(spec)}, the loader refuses it with no rule of "
                                     f"SCHEMA_BLIND to say why: {loader}")


def test_the_fields_are_every_key():
    # Hand-picked keys of each kind are among the fields the property draws from.
    for path in [("watchdog", "startup_timeout"), ("restart", "max_restarts"), ("ports", "base"), ("entrypoint",),
                 ("hosts", 0, "port"), ("tasks", "worker", "count"), ("ssh", "connect_timeout"),
                 ("docker", "build", "context"), ("slurm", "nodes"), ("vertex", "machines", "default", "accelerator_count"),
                 ("kubernetes", "resources", "worker", "memory"), ("elastic", "grow"), ("collective", "timeout")]:
        assert path in FIELDS, path
    assert len(FIELDS) > 100


@pytest.mark.parametrize("path,value", [
    (("watchdog", "startup_timeout"), "120"), (("watchdog", "hang_timeout"), "1e3"), (("restart", "backoff"), "5"),
    (("collective", "timeout"), "30"), (("ssh", "connect_timeout"), "10"), (("watchdog", "stop_grace"), True),
    (("restart", "max_restarts"), 2.0), (("ports", "base"), 23456.0), (("entrypoint",), ""),
    (("entrypoint",), []), (("elastic", "grow"), "yes"), (("ssh", "trust_on_first_use"), 1),
    (("tasks", "worker"), "2"), (("tasks", "worker", "count"), 2.5), (("devices", "gpus"), 2.0),
], ids=lambda v: "key=" + ".".join(map(str, v)) if isinstance(v, tuple) else repr(v))
def test_the_mistakes_of_the_issue_get_one_verdict(path, value):
    loader, schema = _verdicts(spec_for(path, value))
    assert (loader is None) == (schema == []), (loader, schema)


def test_every_schema_blind_rule_is_documented_with_its_reason():
    page = (ROOT / "docs" / "concepts" / "spec.md").read_text()
    for name, _, reason in SCHEMA_BLIND:
        assert f"`{name}`" in page, f"docs/concepts/spec.md does not list the rule {name}"
        assert reason


@settings(max_examples=1500, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS), VALUES)
def test_the_loader_and_the_schema_agree_on_every_field(path, value):
    _check(path, value)


@pytest.mark.parametrize("path", FIELDS, ids=lambda p: "key=" + ".".join(map(str, p)))
def test_every_field_against_every_scalar_mistake(path):
    for value in SCALARS:
        _check(path, value)


def test_the_schema_descriptions_name_no_internal_module():
    # (the docstrings point a reader of the code at modules; the editor's hover text does not)
    text = json.dumps(SCHEMA)
    assert not re.findall(r"launcher[/.][\w/.]+", text), re.findall(r".{40}launcher[/.][\w/.]+", text)[:5]
