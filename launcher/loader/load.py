"""The cluster spec (cluster.yaml): loading, and validation with one-line errors.

The loader sits above the backends: it composes the Spec class from the models (the package
launcher/spec/model/, a leaf) and every registered backend's and export's options block, and runs
the rules that span fields (launcher/loader/rules.py), the backends' own among them. Modules that only
need the models import launcher.spec.model; the names stay importable from here.

The spec's YAML is read only here (through launcher/spec/yamlread.py, its bounds and positions), at the
edge. The models are frozen pydantic models so the rest of tfcluster works on validated, immutable
values. Every problem becomes one line ``FILE:LINE: field.path: what is wrong; the fix``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Annotated, Any, Optional

import yaml
from pydantic import BaseModel, Field, ValidationError, WithJsonSchema, field_validator

from launcher.backends import REGISTRY, backend_classes, backend_names
from launcher.bounded import escape, shorten_quoted
from launcher.bounded import shown as shown_value
from launcher.errors import SpecError, UserError, exc_text
from launcher.export.options import KubernetesOptions, VertexOptions
from launcher.spec.model import EXPORTED, LOCAL_ONLY, NOT_EXPORTED
from launcher.spec.model import (  # noqa: F401 - the models are re-exported: ``from launcher.loader.load import Spec`` works
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
    TaskCounts,
    Tpu,
    Watchdog,
)
from launcher.loader.rules import check_bounds, check_rules, suggest
from launcher.safefile import NotRegular, TooBig, read_regular
from launcher.spec.yamlread import SPEC_BYTES, YAMLBoundError, line_of, load_yaml, node_at, shown_dotted, yaml_type


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
    schema = _public(spec_model().model_json_schema())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


# Where a docstring points a reader of the code at a module: not for the editor's hover text.
_MODULE_REFS = (re.compile(r"\s*\((?:see )?launcher[/.][\w/.]*\)"), re.compile(r": launcher/[\w/]+\.py(?=\))"))


def _public(node: Any) -> Any:
    """The schema with tfcluster's internal module paths taken out of its descriptions."""
    if isinstance(node, dict):
        out = {k: _public(v) for k, v in node.items()}
        if isinstance(out.get("description"), str):
            text = out["description"]
            for pattern in _MODULE_REFS:
                text = pattern.sub("", text)
            out["description"] = text
        return out
    if isinstance(node, list):
        return [_public(v) for v in node]
    return node


def _known_backend(cls, v: str) -> str:
    names = [repr(n) for n in backend_names()]
    if v not in backend_names():
        choices = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(f"{v!r} is not valid; use one of {choices}")
    return v


def load_spec(path: str | Path) -> LoadedSpec:
    """Read, parse and validate a cluster spec; raise SpecError with one line per problem."""
    path = Path(path)
    shown = escape(str(path))
    try:
        # A regular file only (a FIFO would hang, /dev/zero never ends), read up to the bound.
        raw = read_regular(path, SPEC_BYTES)
        text = raw.decode("utf-8")
    except TooBig as exc:
        raise SpecError(f"{shown}: the file is {exc.size:,} bytes, above the bound of {SPEC_BYTES:,} bytes (1 MiB) "
                        "for a spec; a spec this big was not written by a person: fix whatever generated it") from None
    except NotRegular as exc:
        raise SpecError(f"{shown}: {exc}; pass the path of your cluster.yaml") from None
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
    return LoadedSpec(parse_spec(text, shown), path.resolve(), text)


def locate(exc: UserError, path: str | Path) -> UserError:
    """A SpecError raised after loading with the keys its lines are about (``SpecError.keys``: a
    plan's ports, slots, GPUs) as ``FILE:LINE: ...`` lines of the spec at ``path``, the line of each
    key (of the deepest part of it the file has); the error itself when it has no keys."""
    if not exc.keys:
        return exc
    shown = escape(str(path))
    root = None
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SPEC_BYTES + 1)
        if len(raw) <= SPEC_BYTES:
            root = load_yaml(raw.decode("utf-8"))[1]
    except (OSError, ValueError, yaml.YAMLError, YAMLBoundError, RecursionError):
        pass  # (the file changed since it was loaded: the lines without their numbers)
    lines = [f"{shown}{line_of(root, exc.keys[i])}: {line}" if i < len(exc.keys) and exc.keys[i] is not None
             else line for i, line in enumerate(exc.lines)]
    located = copy.copy(exc)  # (the same class: a LaunchError keeps its exit code)
    located.lines, located.args, located.keys = tuple(lines), ("\n".join(lines),), ()
    return located


_QUOTED_TEXT = re.compile(r"\b(alias|tag|anchor|handle|directive|prefix) '[^']*'")
# The keys that make a mapping a spec (each spec has them): a mapping with none of them is not one.
SPEC_MARKS = frozenset({"name", "strategy", "entrypoint", "tasks"})
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
        # (no alias, anchor, tag or directive the text holds is quoted: a file that does not parse may be
        # a secret a symlink points at; a quoted character, such as '\t', stays)
        problem = _QUOTED_TEXT.sub(r"\1", exc.problem or exc.context or "invalid YAML")
        raise SpecError(f"{shown}{line}: YAML syntax error: {problem}; fix the indentation or quoting there") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{shown}: YAML syntax error: {exc}") from None
    if data is None:
        raise SpecError(f"{shown}: the file is empty; start from the example cluster.yaml in the README")
    # A file that is no spec at all (a secret a symlink points at, a shadow file, a key) is named by
    # its shape only: no byte of it is quoted (docs/concepts/trust.md).
    if not isinstance(data, dict):
        raise SpecError(
            f"{shown}:1: the top level must be a mapping (name:, strategy:, tasks:, ...), not a "
            f"{yaml_type(data).split()[0]}"
        )
    if not data.keys() & SPEC_MARKS:
        raise SpecError(f"{shown}: is not a tfcluster spec (a mapping with none of {', '.join(sorted(SPEC_MARKS))}); "
                        "pass the path of your cluster.yaml")
    if "tasks" in data and isinstance(data["tasks"], dict):
        if "master" in data["tasks"]:
            line = line_of(root, ("tasks", "master"))
            raise SpecError(f"{shown}{line}: tasks.master: the legacy role 'master' is not supported; use chief")
    problems = check_bounds(data)
    if problems:
        raise SpecError(*_problem_lines(problems, root, shown))
    try:
        spec = spec_model().model_validate(data)
    except ValidationError as exc:
        errs = sorted(exc.errors(), key=lambda e: _line_number(root, _clean_loc(e["loc"])))
        raise SpecError(*_cut([_format_error(err, root, shown) for err in errs[:ERROR_LINES + 1]], len(errs),
                              shown)) from None
    problems = check_rules(spec)
    if problems:
        raise SpecError(*_problem_lines(problems, root, shown))
    return spec


def _problem_lines(problems: list[tuple[tuple, str]], root: Optional[yaml.Node], shown: str) -> list[str]:
    """``FILE:LINE: field: message`` of each (loc, message) of the rules, cut to ERROR_LINES."""
    return _cut([f"{shown}{line_of(root, loc)}: {shown_dotted(loc)}: {msg}"
                 for loc, msg in problems[:ERROR_LINES + 1]], len(problems), shown)


def _cut(lines: list[str], total: int, shown: str) -> list[str]:
    """At most ERROR_LINES of ``total`` problems' lines, and one that counts the rest."""
    if total <= ERROR_LINES + 1:
        return lines
    return lines[:ERROR_LINES] + [f"{shown}: {total - ERROR_LINES:,} more problems not shown; fix the ones above first"]


# ---------------------------------------------------------------- error formatting


def _format_error(err: dict, root: Optional[yaml.Node], shown: str) -> str:
    typ = err["type"]
    # An unknown key is the user's, whatever it looks like ("str", "a[0]"): not a marker to drop.
    loc = _clean_loc(err["loc"][:-1]) + err["loc"][-1:] if typ == "extra_forbidden" else _clean_loc(err["loc"])
    # A bare count (``worker: -1``) is reported at the task type, where the user wrote it.
    if len(loc) == 3 and loc[0] == "tasks" and loc[2] == "count" and not isinstance(node_at(root, loc[:2]), yaml.MappingNode):
        loc = loc[:2]
    where = f"{shown}{line_of(root, loc)}"
    path = shown_dotted(loc)
    value = err.get("input")
    if typ == "extra_forbidden":
        key = loc[-1]
        parent = loc[:-1]
        valid = _fields_at(parent)
        hint = suggest(key, valid) if isinstance(key, str) else ""
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
    if typ in ("bool_type", "bool_parsing"):
        return f"{where}: {path}: must be true or false (got {shown_value(value)})"
    if typ in ("string_type",):
        return f"{where}: {path}: must be a string (got {shown_value(value)})"
    if typ in ("dict_type", "model_type", "model_attributes_type"):
        return f"{where}: {path}: must be a mapping of keys, not {yaml_type(value)}"
    if typ in ("tuple_type", "list_type"):
        return f"{where}: {path}: must be a list, not {yaml_type(value)}"
    if typ == "value_error":
        msg = shorten_quoted(str(err.get("ctx", {}).get("error", err["msg"])), value)
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



def _line_number(root: Optional[yaml.Node], loc: tuple) -> int:
    text = line_of(root, loc)
    return int(text[1:]) if text else 0
