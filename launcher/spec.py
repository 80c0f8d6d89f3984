"""The cluster spec (cluster.yaml): loading, and validation with one-line errors.

The loader sits above the backends: it composes the Spec class from the models
(launcher/specmodel.py, a leaf) and every registered backend's and export's options block, and runs
the rules that span fields, the backends' own among them. Modules that only need the models import
launcher.specmodel; the names stay importable from here.

The YAML is parsed only here, at the edge. The models are frozen pydantic models so the
rest of tfcluster works on validated, immutable values. Every problem becomes one line
``FILE:LINE: field.path: what is wrong; the fix``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ValidationError, field_validator

from .backends import REGISTRY, backend_class, backend_classes, backend_names
from .errors import SpecError
from .export.options import KubernetesOptions, VertexOptions
from .specmodel import (  # noqa: F401 - the models are re-exported: ``from launcher.spec import Spec`` works
    CLUSTER_STRATEGIES,
    RESERVED_ENV,
    SINGLE_HOST_STRATEGIES,
    STRATEGIES,
    TASK_TYPES,
    Devices,
    Elastic,
    Host,
    LoadedSpec,
    OptionsModel,
    Ports,
    Restart,
    Spec,
    State,
    TaskGroup,
    Tasks,
    Tpu,
    Watchdog,
    dotted,
    line_of,
)


def spec_model() -> type[Spec]:
    """Spec plus export's ``kubernetes:``/``vertex:`` blocks and one field per registered backend's
    options block (``ssh:`` -> ``spec.ssh``, an instance of that backend's ``Options``); the backends
    own the blocks' keys and rules. ``backend:`` is checked against the registry here."""
    key = tuple(REGISTRY.items())
    if key not in _SPEC_MODELS:
        from pydantic import create_model


        # Read only by `tfcluster export` (launcher/export/options.py).
        fields: dict[str, Any] = {"kubernetes": (KubernetesOptions, KubernetesOptions()),
                                  "vertex": (VertexOptions, VertexOptions())}
        for cls in backend_classes():
            if cls.options_key and cls.Options is not None:
                try:
                    default = cls.Options()
                except ValidationError:  # a block with required keys: absent unless given
                    fields[cls.options_key] = (Optional[cls.Options], None)
                else:
                    fields[cls.options_key] = (cls.Options, default)
        checks = {"_backend": field_validator("backend")(_known_backend)}
        _SPEC_MODELS[key] = create_model("Spec", __base__=Spec, __module__=__name__, __validators__=checks, **fields)
    return _SPEC_MODELS[key]


_SPEC_MODELS: dict[tuple, type[Spec]] = {}  # per registry content (tests register backends)


def _known_backend(cls, v: str) -> str:
    names = [repr(n) for n in backend_names()]
    if v not in backend_names():
        choices = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(f"{v!r} is not valid; use one of {choices}")
    return v


# ---------------------------------------------------------------- loading



class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' appears twice (first on line {seen[key] + 1}); keep one", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

if getattr(yaml, "CSafeLoader", None) is not None:  # PyYAML built with libyaml
    class _FastUniqueKeyLoader(yaml.CSafeLoader):
        """libyaml's parser, the same constructors: ~20x faster on a long hosts: list."""

    _FastUniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
else:  # pragma: no cover
    _FastUniqueKeyLoader = None


def _load_yaml(text: str) -> tuple[Any, Optional[yaml.Node]]:
    """The spec's data and its node tree (for the line numbers of messages), parsed once with
    libyaml when PyYAML has it (the pure-Python parser takes seconds on 10,000 hosts). A file
    libyaml refuses is parsed again the pure-Python way, for the messages users have always got."""
    if _FastUniqueKeyLoader is not None:
        loader = _FastUniqueKeyLoader(text)
        try:
            root = loader.get_single_node()
            return (loader.construct_document(root) if root is not None else None), root
        except yaml.YAMLError:
            pass
        finally:
            loader.dispose()
    data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    return data, yaml.compose(text, Loader=yaml.SafeLoader)


def load_spec(path: str | Path) -> LoadedSpec:
    """Read, parse and validate a cluster spec; raise SpecError with one line per problem."""
    path = Path(path)
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{shown}: file not found; pass the path of your cluster.yaml") from None
    except IsADirectoryError:
        raise SpecError(f"{shown}: is a directory; pass the path of your cluster.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{shown}: cannot read ({exc})") from None
    return LoadedSpec(parse_spec(text, shown), path.resolve())


def parse_spec(text: str, shown: str = "cluster.yaml") -> Spec:
    try:
        data, root = _load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError(f"{shown}{line}: YAML syntax error: {problem}; fix the indentation or quoting there") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{shown}: YAML syntax error: {exc}") from None
    if data is None:
        raise SpecError(f"{shown}: the file is empty; start from the example cluster.yaml in the README")
    if not isinstance(data, dict):
        raise SpecError(
            f"{shown}:1: the top level must be a mapping (name:, strategy:, tasks:, ...), not a {_yaml_type(data)}"
        )
    if "tasks" in data and isinstance(data["tasks"], dict):
        if "master" in data["tasks"]:
            line = line_of(root, ("tasks", "master"))
            raise SpecError(f"{shown}{line}: tasks.master: the legacy role 'master' is not supported; use chief")
    try:
        spec = spec_model().model_validate(data)
    except ValidationError as exc:
        errs = sorted(exc.errors(), key=lambda e: _line_number(root, _clean_loc(e["loc"])))
        raise SpecError(*[_format_error(err, root, shown) for err in errs]) from None
    problems = check_rules(spec)
    if problems:
        raise SpecError(*[f"{shown}{line_of(root, loc)}: {dotted(loc)}: {msg}" for loc, msg in problems])
    return spec


# ---------------------------------------------------------------- cross-field rules


def check_rules(spec: Spec) -> list[tuple[tuple, str]]:
    """Rules that span fields: topology per strategy, host references. Returns (loc, message)."""
    problems: list[tuple[tuple, str]] = []
    t = spec.tasks
    chief, worker, ps, evaluator = (t.count(x) for x in TASK_TYPES)
    if evaluator > 1:
        problems.append((("tasks", "evaluator"), f"{evaluator} evaluators; at most one evaluator is allowed"))
    if chief > 1:
        problems.append((("tasks", "chief"), f"{chief} chiefs; a cluster has at most one chief"))
    if spec.single_host:
        if (chief, worker, ps, evaluator) != (0, 1, 0, 0):
            problems.append((("tasks",), f"strategy {spec.strategy} runs one task on one host; for several hosts "
                             "use multi_worker_mirrored (or set tasks: {worker: 1})"))
    elif spec.devices.cpus is not None:
        problems.append((("devices", "cpus"), f"{spec.strategy} runs one replica per task on CPU (TF splits only "
                         "GPUs across a worker's replicas); drop devices.cpus or use strategy: mirrored"))
    if spec.tpu is not None and spec.strategy != "tpu":
        problems.append((("tpu",), "only strategy tpu uses a TPU; remove tpu: or set strategy: tpu"))
    if spec.strategy == "multi_worker_mirrored":
        if ps:
            problems.append(
                (("tasks", "ps"), "multi_worker_mirrored has no parameter servers; set ps: 0 or use strategy: parameter_server")
            )
        if chief + worker == 0:
            problems.append((("tasks", "worker"), "no workers; multi_worker_mirrored needs at least one worker or chief"))
    elif spec.strategy == "parameter_server":
        if chief != 1:
            if chief == 0:
                problems.append((("tasks", "chief"), "parameter_server needs exactly one chief (the coordinator); set chief: 1"))
        if ps < 1:
            problems.append((("tasks", "ps"), "parameter_server needs at least one ps; set ps: 1 or more"))
        if worker < 1:
            problems.append((("tasks", "worker"), "parameter_server needs at least one worker; set worker: 1 or more"))

    names = [h.name for h in spec.hosts]
    known: set[str] = set()  # (sets: 10,000 hosts are 10,000 look-ups, not 50 million comparisons)
    for i, name in enumerate(names):
        if name in known:
            problems.append((("hosts", i, "name"), f"host '{name}' is defined twice; give each host a unique name"))
        known.add(name)
    for task_type in TASK_TYPES:
        group = t.group(task_type)
        for j, name in enumerate(group.hosts or ()):
            if name not in known:
                hint = _suggest(name, names)
                known = f"defined hosts: {', '.join(names)}" if names else "no hosts are defined; add them under hosts:"
                problems.append(((("tasks", task_type, "hosts", j)), f"unknown host '{name}'{hint}; {known}"))
    backend = backend_class(spec.backend)
    if spec.restart.warm_standby and not backend.capabilities.warm_standby:
        able = [cls.name for cls in backend_classes() if cls.capabilities.warm_standby]
        who = f"the {' and '.join(able)} backend{'s' if len(able) > 1 else ''}" if able else "no backend"
        problems.append((("restart", "warm_standby"), f"only {who} support{'' if len(able) > 1 else 's'} warm "
                         f"standby; set it to false for backend {spec.backend}"))
    for task_type in TASK_TYPES:
        if task_type != "worker" and t.group(task_type).min is not None:
            problems.append((("tasks", task_type, "min"), f"only workers can be fewer than count; a lost {task_type}'s "
                             "host is replaced by a spare: remove min"))
    if t.worker.min is not None and not backend.capabilities.elastic:
        able = [cls.name for cls in backend_classes() if cls.capabilities.elastic]
        problems.append((("tasks", "worker", "min"), f"backend {spec.backend} cannot go on with fewer workers; min "
                         f"works with backend {' and '.join(able) or 'none'}; remove min"))
    if spec.discovery is not None and not backend.capabilities.elastic:
        able = [cls.name for cls in backend_classes() if cls.capabilities.elastic]
        problems.append((("discovery",), f"backend {spec.backend} cannot use hosts that come and go; discovery: "
                         f"works with backend {' and '.join(able) or 'none'}; remove discovery:"))
    if spec.elastic is not None and not backend.capabilities.elastic:
        able = [cls.name for cls in backend_classes() if cls.capabilities.elastic]
        problems.append((("elastic",), f"backend {spec.backend} cannot move tasks to other hosts; elastic: works "
                         f"with backend {' and '.join(able) or 'none'}; remove elastic:"))
    for task_type in TASK_TYPES:
        if t.group(task_type).gpus and spec.devices.gpus == 0:
            problems.append((("tasks", task_type, "gpus"), f"devices.gpus 0 lets no task use a GPU; drop "
                             f"tasks.{task_type}.gpus or set devices.gpus"))
    if spec.strategy != "multi_worker_mirrored" and spec.collective != type(spec.collective)():
        problems.append((("collective",), f"only multi_worker_mirrored runs collectives (all-reduce), not "
                         f"{spec.strategy}; remove collective:"))
    problems += backend.check_spec(spec)
    return problems


# ---------------------------------------------------------------- error formatting


def _format_error(err: dict, root: Optional[yaml.Node], shown: str) -> str:
    loc = _clean_loc(err["loc"])
    typ = err["type"]
    # A bare count (``worker: -1``) is reported at the task type, where the user wrote it.
    if len(loc) == 3 and loc[0] == "tasks" and loc[2] == "count" and not isinstance(_node_at(root, loc[:2]), yaml.MappingNode):
        loc = loc[:2]
    where = f"{shown}{line_of(root, loc)}"
    path = dotted(loc)
    value = err.get("input")
    if typ == "extra_forbidden":
        key = str(loc[-1])
        parent = loc[:-1]
        valid = _fields_at(parent)
        hint = _suggest(key, valid)
        listing = f"; valid keys: {', '.join(valid)}" if valid else ""
        return f"{where}: {path}: unknown key '{key}'{hint}{listing}"
    if typ == "missing":
        return f"{where}: {path}: required key is missing; add {_missing_hint(loc)}"
    if typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"{where}: {path}: {value!r} is not valid; use one of {expected}"
    if typ in ("int_type", "int_parsing", "int_from_float", "greater_than_equal", "less_than_equal", "greater_than"):
        return f"{where}: {path}: {_number_rule(loc, err)} (got {value!r})"
    if typ in ("float_type", "float_parsing"):
        return f"{where}: {path}: must be a number of seconds (got {value!r})"
    if typ in ("string_type",):
        return f"{where}: {path}: must be a string (got {value!r})"
    if typ in ("dict_type", "model_type", "model_attributes_type"):
        return f"{where}: {path}: must be a mapping of keys, not {_yaml_type(value)}"
    if typ in ("tuple_type", "list_type"):
        return f"{where}: {path}: must be a list, not {_yaml_type(value)}"
    if typ == "value_error":
        msg = str(err.get("ctx", {}).get("error", err["msg"]))
        return f"{where}: {path}: {msg}"
    return f"{where}: {path}: {err['msg']}"


def _number_rule(loc: tuple, err: dict) -> str:
    ctx = err.get("ctx", {})
    last = loc[-1] if loc else ""
    if last == "count" or (len(loc) == 2 and loc[0] == "tasks"):
        return "task count must be a whole number >= 0"
    if last in ("base", "port"):
        return "port must be a whole number from 1 to 65535"
    if "ge" in ctx:
        return f"must be a whole number >= {ctx['ge']}"
    if "le" in ctx:
        return f"must be a whole number <= {ctx['le']}"
    return "must be a whole number"


def _missing_hint(loc: tuple) -> str:
    hints = {
        ("name",): "name: my-run",
        ("strategy",): "strategy: multi_worker_mirrored (or " + ", ".join(STRATEGIES[1:]) + ")",
        ("entrypoint",): "entrypoint: python -m worker (the command every task runs)",
        ("tasks",): "tasks: {worker: 2}",
    }
    return hints.get(loc, f"{loc[-1]}: ..." if loc else "it")


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's union/function markers so the loc is a path into the YAML."""
    out = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or part.startswith("function-")):
            continue
        if part in ("str", "tuple[str, ...]"):
            continue
        out.append(part)
    return tuple(out)



def _fields_at(loc: tuple) -> list[str]:
    model: Any = spec_model()
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_of(field.annotation)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}).keys())


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _suggest(word: str, options: list[str]) -> str:
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _yaml_type(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, str):
        return f"string {value!r}"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"


def _node_at(root: Optional[yaml.Node], loc: tuple) -> Optional[yaml.Node]:
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None
    return node


def _line_number(root: Optional[yaml.Node], loc: tuple) -> int:
    text = line_of(root, loc)
    return int(text[1:]) if text else 0
