"""The cluster spec (cluster.yaml): loading, and validation with one-line errors.

The loader sits above the backends: it composes the Spec class from the models
(launcher/spec/model.py, a leaf) and every registered backend's and export's options block, and runs
the rules that span fields, the backends' own among them. Modules that only need the models import
launcher.spec.model; the names stay importable from here.

The YAML is parsed only here, at the edge. The models are frozen pydantic models so the
rest of tfcluster works on validated, immutable values. Every problem becomes one line
``FILE:LINE: field.path: what is wrong; the fix``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import yaml
from pydantic import BaseModel, Field, ValidationError, WithJsonSchema, field_validator

from launcher.backends import REGISTRY, backend_class, backend_classes, backend_names
from launcher.bounded import escape, listing, shorten_quoted
from launcher.bounded import shown as shown_value
from launcher.errors import SpecError, exc_text
from launcher.export.options import KubernetesOptions, VertexOptions
from launcher.spec.model import EXPORTED, LOCAL_ONLY, NOT_EXPORTED
from launcher.spec.model import (  # noqa: F401 - the models are re-exported: ``from launcher.spec.load import Spec`` works
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
        fields: dict[str, Any] = {
            "kubernetes": (Annotated[KubernetesOptions, EXPORTED], Field(KubernetesOptions(), description=_doc(KubernetesOptions))),
            "vertex": (Annotated[VertexOptions, EXPORTED], Field(VertexOptions(), description=_doc(VertexOptions)))}
        for cls in backend_classes():
            if cls.options_key and cls.Options is not None:
                verdict = EXPORTED if cls.options_exported else NOT_EXPORTED
                described = Field(description=_doc(cls.Options))
                try:
                    default = cls.Options()
                except ValidationError:  # a block with required keys: absent unless given
                    fields[cls.options_key] = (Annotated[Optional[cls.Options], verdict],
                                               Field(None, description=described.description))
                else:
                    fields[cls.options_key] = (Annotated[cls.Options, verdict], Field(default, description=described.description))
        # backend: one of the registered names (the validator below says which); the schema lists them.
        fields["backend"] = (Annotated[str, WithJsonSchema({"enum": list(backend_names()), "type": "string"}), LOCAL_ONLY],
                             Field("local", description=Spec.model_fields["backend"].description))
        checks = {"_backend": field_validator("backend")(_known_backend)}
        _SPEC_MODELS[key] = create_model("Spec", __base__=Spec, __module__=__name__, __validators__=checks, **fields)
    return _SPEC_MODELS[key]


_SPEC_MODELS: dict[tuple, type[Spec]] = {}  # per registry content (tests register backends)


def _doc(model: type) -> str:
    """A block's description: its class docstring, one paragraph."""
    return " ".join((model.__doc__ or "").split())


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of cluster.yaml with every registered backend's block:
    what `tfcluster schema` prints, and what editors check a spec against."""
    schema = spec_model().model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _known_backend(cls, v: str) -> str:
    names = [repr(n) for n in backend_names()]
    if v not in backend_names():
        choices = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(f"{v!r} is not valid; use one of {choices}")
    return v


# ---------------------------------------------------------------- loading

# Bounds no honest spec meets, checked while the file is read, before anything grows with the input
# (a spec may come from a stranger: a CI job that validates pull requests). Each is refused in one line
# naming the bound. The "Bounds" paragraph of docs/concepts/spec.md lists them.
SPEC_BYTES = 1 << 20  # the file: 1 MiB (10,000 hosts in flow style are about 400 KB)
SPEC_DEPTH = 64  # lists and mappings inside each other (a spec needs about 6)
SPEC_VALUES = 1_000_000  # values once aliases (*name) are expanded: the "billion laughs" stops here
SPEC_ITEMS = 100_000  # entries in one list or mapping (hosts:, env:, ports:)
SPEC_TASKS = 100_000  # tasks in all: ten times the 10,000 that plan in about 2 s (BENCHMARKS.md)
# The kernel's own limits on what a task is started with: one argument or one KEY=value of the
# environment (MAX_ARG_STRLEN, also the bound on every string of the spec), and the command line and
# environment the spec adds, together: half the usual ARG_MAX of 2 MiB (TF_CONFIG and the inherited
# environment need the rest).
ARG_STRLEN = 131_072
ARG_TOTAL = 1 << 20


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: its keys may be overridden here
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"a key is a {_yaml_type(key).split()[0]}; keys are names (strings)", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {shown_value(key)} appears twice (first on line {seen[key] + 1}); keep one",
                key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    loader.flatten_mapping(node)  # (SafeConstructor.construct_mapping would, but only after the keys above)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_object(loader: yaml.SafeLoader, node: yaml.Node, deep: bool = False) -> Any:
    """PyYAML's construct_object, with a value Python cannot make (an int of 5,000 digits, a date
    that is none) a ConstructorError at the value's line instead of a ValueError from inside PyYAML."""
    try:
        return yaml.constructor.BaseConstructor.construct_object(loader, node, deep)
    except yaml.YAMLError:
        raise
    except Exception as exc:  # noqa: BLE001 - IndexError too (`!!int` of nothing): any of them is the input's
        raise yaml.constructor.ConstructorError(None, None, f"this value cannot be read ({exc_text(exc)})",
                                                node.start_mark) from None


_UniqueKeyLoader.construct_object = _construct_object  # type: ignore[method-assign]

if getattr(yaml, "CSafeLoader", None) is not None:  # PyYAML built with libyaml
    class _FastUniqueKeyLoader(yaml.CSafeLoader):
        """libyaml's parser, the same constructors: ~20x faster on a long hosts: list."""

    _FastUniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    _FastUniqueKeyLoader.construct_object = _construct_object  # type: ignore[method-assign]
else:  # pragma: no cover
    _FastUniqueKeyLoader = None


class YAMLBoundError(Exception):
    """The YAML passes a bound (``what``: ``nesting``, ``values``, ...) at ``mark``: one line's words."""

    def __init__(self, message: str, mark: Optional[yaml.Mark] = None) -> None:
        super().__init__(message)
        self.message, self.mark = message, mark


@dataclass(frozen=True)
class YAMLBounds:
    depth: int = SPEC_DEPTH
    values: int = SPEC_VALUES
    items: int = SPEC_ITEMS
    chars: int = ARG_STRLEN
    fix: str = "this is not a spec a person wrote; fix whatever generated it"


def compose_bounded(text: str, loader_cls: type, bounds: YAMLBounds = YAMLBounds()) -> Optional[yaml.Node]:
    """The node tree of the one YAML document in ``text``, built from the parser's events without
    recursion (PyYAML's composer recurses: 20,000 nested brackets were a RecursionError), refusing
    with YAMLBoundError, as it goes, nesting past ``bounds.depth``, a string past ``bounds.chars``,
    a list or mapping past ``bounds.items`` entries, and aliases that expand the document past
    ``bounds.values`` values (or refer to the node that holds them). Parser errors are PyYAML's."""
    loader = loader_cls(text)
    get_event, resolve = loader.get_event, loader.resolve
    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    starts = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    ends = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    scalar_node = yaml.ScalarNode
    try:
        anchors: dict[str, yaml.Node] = {}
        sizes: dict[int, int] = {}  # id(anchored node) -> values it expands to; absent while it is open
        stack: list[list] = []  # open collections: [node, children so far, values in them]
        total = 0
        root: Optional[yaml.Node] = None
        documents = 0

        anchored: set[int] = set()

        def anchor(name: str, node: yaml.Node, mark: yaml.Mark) -> None:
            if name in anchors:
                raise yaml.composer.ComposerError(f"found duplicate anchor {shown_value(name)}; first occurrence",
                                                  anchors[name].start_mark, "second occurrence", mark)
            anchors[name] = node
            anchored.add(id(node))

        while True:
            event = get_event()
            kind = type(event)
            if kind is scalar_event:
                value = event.value
                if len(value) > bounds.chars:
                    raise YAMLBoundError(f"a string of {len(value):,} characters, above the bound of "
                                         f"{bounds.chars:,} (the kernel's limit on one argument); {bounds.fix}",
                                         event.start_mark)
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(scalar_node, value, event.implicit)
                node = scalar_node(tag, value, event.start_mark, event.end_mark, style=event.style)
                if event.anchor is not None:
                    anchor(event.anchor, node, event.start_mark)
                    sizes[id(node)] = 1
                size = 1
            elif kind is alias_event:
                target = anchors.get(event.anchor)
                if target is None:
                    raise yaml.composer.ComposerError(
                        None, None, f"found undefined alias {shown_value(event.anchor)}", event.start_mark)
                size = sizes.get(id(target), -1)
                if size < 0:
                    raise YAMLBoundError(f"the alias *{escape(event.anchor[:40])} refers to the list or mapping that "
                                         "holds it (an endless value); write the value out", event.start_mark)
                node = target
            elif kind in starts:
                if len(stack) >= bounds.depth:
                    raise YAMLBoundError(f"lists and mappings nested more than {bounds.depth} deep; {bounds.fix}",
                                         event.start_mark)
                cls = yaml.SequenceNode if kind is yaml.SequenceStartEvent else yaml.MappingNode
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(cls, None, event.implicit)
                node = cls(tag, [], event.start_mark, None, flow_style=event.flow_style)
                if event.anchor is not None:
                    anchor(event.anchor, node, event.start_mark)
                stack.append([node, [], 0])
                total += 1
                continue
            elif kind in ends:
                node, children, inner = stack.pop()
                node.end_mark = event.end_mark
                node.value = list(zip(children[0::2], children[1::2])) if kind is yaml.MappingEndEvent else children
                size = inner + 1
                total -= size  # (counted as it came: itself at its start, then its values)
                if id(node) in anchored:
                    sizes[id(node)] = size
            elif kind is yaml.StreamEndEvent:
                break
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise yaml.composer.ComposerError(
                        None, None, "a second YAML document (after ---); a spec is one document", event.start_mark)
                continue
            else:  # the stream's start, a document's end
                continue
            total += size
            if total > bounds.values:
                raise YAMLBoundError(f"aliases (*name) expand it to more than {bounds.values:,} values (the "
                                     f"'billion laughs' shape); write the values out or use fewer aliases",
                                     event.start_mark)
            if stack:
                frame = stack[-1]
                children = frame[1]
                children.append(node)
                frame[2] += size
                if len(children) > bounds.items * (2 if frame[0].id == "mapping" else 1):
                    raise YAMLBoundError(f"a list or mapping of more than {bounds.items:,} entries; "
                                         f"{bounds.fix}", event.start_mark)
            else:
                root = node
        return root
    finally:
        loader.dispose()


def load_yaml(text: str, bounds: YAMLBounds = YAMLBounds()) -> tuple[Any, Optional[yaml.Node]]:
    """The data and the node tree (for the line numbers of messages) of ``text``, within
    ``bounds`` (see compose_bounded), parsed with libyaml when PyYAML has it (the pure-Python
    parser takes seconds on 10,000 hosts). A file libyaml refuses is parsed again the pure-Python
    way, for the messages users have always got. Raises yaml.YAMLError or YAMLBoundError."""
    root = None
    if _FastUniqueKeyLoader is not None:
        try:
            root = compose_bounded(text, _FastUniqueKeyLoader, bounds)
        except yaml.YAMLError:
            root = None
        else:
            return _construct(root, _FastUniqueKeyLoader), root
    root = compose_bounded(text, _UniqueKeyLoader, bounds)
    return _construct(root, _UniqueKeyLoader), root


def _construct(root: Optional[yaml.Node], loader_cls: type) -> Any:
    if root is None:
        return None
    loader = loader_cls("")
    try:
        return loader.construct_document(root)
    except yaml.YAMLError:
        raise
    except Exception as exc:  # noqa: BLE001 - as _construct_object, for the values constructed after their node  # int("9" * 5000), a date that is not one
        raise yaml.constructor.ConstructorError(None, None, f"a value cannot be read ({exc_text(exc)})",
                                                None) from None
    finally:
        loader.dispose()


def load_spec(path: str | Path) -> LoadedSpec:
    """Read, parse and validate a cluster spec; raise SpecError with one line per problem."""
    path = Path(path)
    shown = escape(str(path))
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SPEC_BYTES + 1)
        if len(raw) > SPEC_BYTES:
            size = path.stat().st_size
            raise SpecError(f"{shown}: the file is {size:,} bytes, above the bound of {SPEC_BYTES:,} bytes (1 MiB) "
                            "for a spec; a spec this big was not written by a person: fix whatever generated it")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{shown}: file not found; pass the path of your cluster.yaml") from None
    except IsADirectoryError:
        raise SpecError(f"{shown}: is a directory; pass the path of your cluster.yaml") from None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{shown}:{line}: the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                        f"at offset {exc.start:,}); save it as UTF-8") from None
    except OSError as exc:
        raise SpecError(f"{shown}: cannot read ({exc_text(exc)})") from None
    return LoadedSpec(parse_spec(text, shown), path.resolve())


ERROR_LINES = 20  # problems shown of a spec that has more; the rest are counted


def parse_spec(text: str, shown: str = "cluster.yaml") -> Spec:
    """Parse and validate ``text``: the Spec, or SpecError with one bounded line per problem (at
    most ERROR_LINES and one that counts the rest). Whatever the text, nothing else is raised:
    a RecursionError, MemoryError or UnicodeError on input is one line too."""
    try:
        return _parse_spec(text, shown)
    except (RecursionError, MemoryError, UnicodeError) as exc:
        raise SpecError(f"{shown}: cannot be read as a spec ({type(exc).__name__}: {shown_value(str(exc))}); "
                        "this is not a spec a person wrote: fix whatever generated it") from None


def _parse_spec(text: str, shown: str) -> Spec:
    if len(text) > SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > SPEC_BYTES:
        raise SpecError(f"{shown}: the spec is more than {SPEC_BYTES:,} bytes (1 MiB), the bound for a spec; "
                        "a spec this big was not written by a person: fix whatever generated it")
    try:
        data, root = load_yaml(text)
    except YAMLBoundError as exc:
        line = f":{exc.mark.line + 1}" if exc.mark else ""
        raise SpecError(f"{shown}{line}: {exc.message}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        what = f"character {shown_value(chr(exc.character))}" if isinstance(exc.character, int) else "a byte"
        raise SpecError(f"{shown}{f':{line}' if line else ''}: YAML syntax error: {what} is not allowed in YAML "
                        "(a control character); remove it, or write it as an escape in a double-quoted string") \
            from None
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
    problems = _bounds(data)
    if problems:
        raise SpecError(*_cut([f"{shown}{line_of(root, loc)}: {_path(loc)}: {msg}" for loc, msg in problems],
                              len(problems), shown))
    try:
        spec = spec_model().model_validate(data)
    except ValidationError as exc:
        errs = sorted(exc.errors(), key=lambda e: _line_number(root, _clean_loc(e["loc"])))
        raise SpecError(*_cut([_format_error(err, root, shown) for err in errs[:ERROR_LINES + 1]], len(errs),
                              shown)) from None
    problems = check_rules(spec)
    if problems:
        raise SpecError(*_cut([f"{shown}{line_of(root, loc)}: {_path(loc)}: {msg}"
                               for loc, msg in problems[:ERROR_LINES + 1]], len(problems), shown))
    return spec


def _cut(lines: list[str], total: int, shown: str) -> list[str]:
    """At most ERROR_LINES of ``total`` problems' lines, and one that counts the rest."""
    if total <= ERROR_LINES + 1:
        return lines
    return lines[:ERROR_LINES] + [f"{shown}: {total - ERROR_LINES:,} more problems not shown; fix the ones above first"]


def _bounds(data: dict) -> list[tuple[tuple, str]]:
    """The task counts and what a task is started with (its command line, its environment),
    against SPEC_TASKS and the kernel's limits, checked on the YAML's data before the models see
    it (a count of 100,000,000 would be planned task by task). A value of the wrong type is left
    to the models' own message."""
    problems: list[tuple[tuple, str]] = []
    tasks = data.get("tasks")
    total = 0
    if isinstance(tasks, dict):
        for task_type, group in tasks.items():
            count = group.get("count") if isinstance(group, dict) else group
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                total += count
                if count > SPEC_TASKS:
                    problems.append((("tasks", task_type), f"{count:,} tasks, above the bound of {SPEC_TASKS:,} "
                                     "tasks a spec may ask for; set a smaller count"))
        if total > SPEC_TASKS and not problems:
            problems.append((("tasks",), f"{total:,} tasks in all, above the bound of {SPEC_TASKS:,} tasks a "
                             "spec may ask for; set smaller counts"))
    used = 0
    entry = data.get("entrypoint")
    parts = [entry] if isinstance(entry, str) else list(entry) if isinstance(entry, list) else []
    for i, part in enumerate(parts):
        if not isinstance(part, str):
            continue
        loc = ("entrypoint",) if isinstance(entry, str) else ("entrypoint", i)
        size = len(part.encode("utf-8", "surrogatepass")) + 1
        used += size
        if "\0" in part:
            problems.append((loc, "holds a NUL character (\\x00), which no command line can carry; remove it"))
        elif size > ARG_STRLEN:
            problems.append((loc, f"{size - 1:,} bytes, above the kernel's bound of {ARG_STRLEN:,} bytes for one "
                             "argument (MAX_ARG_STRLEN); put long input in a file the command reads"))
    env = data.get("env")
    if isinstance(env, dict):
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, float)) or isinstance(value, bool):
                continue
            text = f"{key}={value}"
            size = len(text.encode("utf-8", "surrogatepass")) + 1
            used += size
            if "\0" in text:
                problems.append((("env", key), "holds a NUL character (\\x00), which no environment can carry; "
                                 "remove it"))
            elif size > ARG_STRLEN:
                problems.append((("env", key), f"{size - 1:,} bytes as KEY=value, above the kernel's bound of "
                                 f"{ARG_STRLEN:,} bytes for one variable (MAX_ARG_STRLEN); put long values in a "
                                 "file the task reads"))
    if used > ARG_TOTAL and not problems:
        problems.append((("env",) if isinstance(env, dict) else ("entrypoint",),
                         f"the command line and env: together are {used:,} bytes, above the bound of "
                         f"{ARG_TOTAL:,} (half the kernel's usual ARG_MAX, the rest is for TF_CONFIG and the "
                         "inherited environment); put long values in a file the task reads"))
    return problems


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
    unknown = 0
    for task_type in TASK_TYPES:
        group = t.group(task_type)
        for j, name in enumerate(group.hosts or ()):
            if name not in known:
                unknown += 1  # (a close match among 20,000 names costs; the first few get one)
                hint = _suggest(name, names) if unknown <= 5 else ""
                defined = f"defined hosts: {listing(names, 'hosts')}" if names else \
                    "no hosts are defined; add them under hosts:"
                problems.append(((("tasks", task_type, "hosts", j)), f"unknown host {shown_value(name)}{hint}; "
                                 f"{defined}"))
    backend = backend_class(spec.backend)
    # restart.warm_standby: true on a backend that keeps no standby is not refused: the run is
    # the same, with cold restarts, and `plan` says so in one line (launcher/supervise/standby.py).
    for task_type in TASK_TYPES:
        if task_type != "worker" and t.group(task_type).min is not None:
            problems.append((("tasks", task_type, "min"), f"only workers can be fewer than count; a lost {task_type}'s "
                             "host is replaced by a spare: remove min"))
    if t.worker.min is not None and not backend.capabilities.elastic:
        problems.append((("tasks", "worker", "min"), f"backend {spec.backend} cannot go on with fewer workers; min "
                         f"works with backend {' and '.join(_able('elastic')) or 'none'}; remove min"))
    if spec.discovery is not None and not backend.capabilities.elastic:
        problems.append((("discovery",), f"backend {spec.backend} cannot use hosts that come and go; discovery: "
                         f"works with backend {' and '.join(_able('elastic')) or 'none'}; remove discovery:"))
    if spec.elastic is not None and not backend.capabilities.elastic:
        problems.append((("elastic",), f"backend {spec.backend} cannot move tasks to other hosts; elastic: works "
                         f"with backend {' and '.join(_able('elastic')) or 'none'}; remove elastic:"))
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


def _able(capability: str) -> list[str]:
    """The backends with ``capability`` (a ``Capabilities`` field), for a refusal that names them."""
    return [cls.name for cls in backend_classes() if getattr(cls.capabilities, capability)]


def _format_error(err: dict, root: Optional[yaml.Node], shown: str) -> str:
    typ = err["type"]
    # An unknown key is the user's, whatever it looks like ("str", "a[0]"): not a marker to drop.
    loc = _clean_loc(err["loc"][:-1]) + err["loc"][-1:] if typ == "extra_forbidden" else _clean_loc(err["loc"])
    # A bare count (``worker: -1``) is reported at the task type, where the user wrote it.
    if len(loc) == 3 and loc[0] == "tasks" and loc[2] == "count" and not isinstance(_node_at(root, loc[:2]), yaml.MappingNode):
        loc = loc[:2]
    where = f"{shown}{line_of(root, loc)}"
    path = _path(loc)
    value = err.get("input")
    if typ == "extra_forbidden":
        key = loc[-1]
        parent = loc[:-1]
        valid = _fields_at(parent)
        hint = _suggest(key, valid) if isinstance(key, str) else ""
        keys = f"; valid keys: {', '.join(valid)}" if valid else ""
        return f"{where}: {path}: unknown key {shown_value(str(key))}{hint}{keys}"
    if typ == "missing":
        return f"{where}: {path}: required key is missing; add {_missing_hint(loc)}"
    if typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"{where}: {path}: {shown_value(value)} is not valid; use one of {expected}"
    if typ in ("int_type", "int_parsing", "int_from_float", "greater_than_equal", "less_than_equal", "greater_than"):
        return f"{where}: {path}: {_number_rule(loc, err)} (got {shown_value(value)})"
    if typ in ("float_type", "float_parsing"):
        return f"{where}: {path}: must be a number of seconds (got {shown_value(value)})"
    if typ in ("string_type",):
        return f"{where}: {path}: must be a string (got {shown_value(value)})"
    if typ in ("dict_type", "model_type", "model_attributes_type"):
        return f"{where}: {path}: must be a mapping of keys, not {_yaml_type(value)}"
    if typ in ("tuple_type", "list_type"):
        return f"{where}: {path}: must be a list, not {_yaml_type(value)}"
    if typ == "value_error":
        msg = shorten_quoted(str(err.get("ctx", {}).get("error", err["msg"])), value)
        return f"{where}: {path}: {msg}"
    return f"{where}: {path}: {err['msg']}"


def _path(loc: tuple) -> str:
    """``dotted(loc)`` with each key from the input shown bounded and escaped (a key may be
    anything: 100,000 characters, terminal escapes)."""
    return dotted(tuple(p if isinstance(p, int) or (isinstance(p, str) and len(p) <= 40 and p.isprintable())
                        else shown_value(p if isinstance(p, str) else str(p), 40) for p in loc))


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
        ("entrypoint",): "entrypoint: tfcluster-worker (the command every task runs)",
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
        return f"string {shown_value(value)}"
    if value is None:
        return "null"
    return f"{type(value).__name__} {shown_value(value)}"


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
