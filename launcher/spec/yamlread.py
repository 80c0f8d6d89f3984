"""Reading cluster.yaml's text: the YAML, within bounds, and where each value sits in it.

``compose_bounded``: the node tree of one YAML document, built without recursion, refusing as it
goes what no person wrote (nesting, a string, a list or the aliases' expansion past a bound);
``load_yaml``: the data and that node tree, a key given twice refused; and the positions the
loader's and the export's one-line errors name (``line_of``, ``dotted``). It knows none of the
spec's keys: discovery reads a command's host list with it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import yaml

from launcher.bounded import escape
from launcher.bounded import shown as shown_value
from launcher.errors import exc_text

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
                None, None, f"a key is a {yaml_type(key).split()[0]}; keys are names (strings)", key_node.start_mark
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


class _Composer:
    """The state of compose_bounded as it reads the parser's events: the anchors and the values each
    anchored node expands to, the open collections, and the values counted so far. Each step takes
    one event and raises YAMLBoundError (or PyYAML's ComposerError) where the document breaks a bound."""

    def __init__(self, resolve, bounds: YAMLBounds) -> None:
        self.resolve, self.bounds = resolve, bounds
        self.anchors: dict[str, yaml.Node] = {}
        self.anchored: set[int] = set()
        self.sizes: dict[int, int] = {}  # id(anchored node) -> values it expands to; absent while it is open
        self.stack: list[list] = []  # open collections: [node, children so far, values in them]
        self.total = 0
        self.root: Optional[yaml.Node] = None

    def anchor(self, name: str, node: yaml.Node, mark: yaml.Mark) -> None:
        if name in self.anchors:
            raise yaml.composer.ComposerError(f"found duplicate anchor {shown_value(name)}; first occurrence",
                                              self.anchors[name].start_mark, "second occurrence", mark)
        self.anchors[name] = node
        self.anchored.add(id(node))

    def scalar(self, event: yaml.ScalarEvent) -> tuple[yaml.Node, int]:
        value = event.value
        bounds = self.bounds
        if len(value) > bounds.chars:
            raise YAMLBoundError(f"a string of {len(value):,} characters, above the bound of "
                                 f"{bounds.chars:,} (the kernel's limit on one argument); {bounds.fix}",
                                 event.start_mark)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(yaml.ScalarNode, value, event.implicit)
        node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style)
        if event.anchor is not None:
            self.anchor(event.anchor, node, event.start_mark)
            self.sizes[id(node)] = 1
        return node, 1

    def alias(self, event: yaml.AliasEvent) -> tuple[yaml.Node, int]:
        target = self.anchors.get(event.anchor)
        if target is None:
            raise yaml.composer.ComposerError(
                None, None, f"found undefined alias {shown_value(event.anchor)}", event.start_mark)
        size = self.sizes.get(id(target), -1)
        if size < 0:
            raise YAMLBoundError(f"the alias *{escape(event.anchor[:40])} refers to the list or mapping that "
                                 "holds it (an endless value); write the value out", event.start_mark)
        return target, size

    def open(self, event: yaml.CollectionStartEvent) -> None:
        bounds = self.bounds
        if len(self.stack) >= bounds.depth:
            raise YAMLBoundError(f"lists and mappings nested more than {bounds.depth} deep; {bounds.fix}",
                                 event.start_mark)
        cls = yaml.SequenceNode if type(event) is yaml.SequenceStartEvent else yaml.MappingNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(cls, None, event.implicit)
        node = cls(tag, [], event.start_mark, None, flow_style=event.flow_style)
        if event.anchor is not None:
            self.anchor(event.anchor, node, event.start_mark)
        self.stack.append([node, [], 0])
        self.total += 1

    def close(self, event: yaml.CollectionEndEvent) -> tuple[yaml.Node, int]:
        node, children, inner = self.stack.pop()
        node.end_mark = event.end_mark
        node.value = list(zip(children[0::2], children[1::2])) if type(event) is yaml.MappingEndEvent else children
        size = inner + 1
        self.total -= size  # (counted as it came: itself at its start, then its values)
        if id(node) in self.anchored:
            self.sizes[id(node)] = size
        return node, size

    def place(self, node: yaml.Node, size: int, event: yaml.Event) -> None:
        """Count a finished value and put it into the open collection (or make it the root)."""
        bounds = self.bounds
        self.total += size
        if self.total > bounds.values:
            raise YAMLBoundError(f"aliases (*name) expand it to more than {bounds.values:,} values (the "
                                 f"'billion laughs' shape); write the values out or use fewer aliases",
                                 event.start_mark)
        if self.stack:
            frame = self.stack[-1]
            children = frame[1]
            children.append(node)
            frame[2] += size
            if len(children) > bounds.items * (2 if frame[0].id == "mapping" else 1):
                raise YAMLBoundError(f"a list or mapping of more than {bounds.items:,} entries; "
                                     f"{bounds.fix}", event.start_mark)
        else:
            self.root = node


def compose_bounded(text: str, loader_cls: type, bounds: YAMLBounds = YAMLBounds()) -> Optional[yaml.Node]:
    """The node tree of the one YAML document in ``text``, built from the parser's events without
    recursion (PyYAML's composer recurses: 20,000 nested brackets were a RecursionError), refusing
    with YAMLBoundError, as it goes, nesting past ``bounds.depth``, a string past ``bounds.chars``,
    a list or mapping past ``bounds.items`` entries, and aliases that expand the document past
    ``bounds.values`` values (or refer to the node that holds them). Parser errors are PyYAML's."""
    loader = loader_cls(text)
    get_event = loader.get_event
    starts = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    ends = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    try:
        composer = _Composer(loader.resolve, bounds)
        scalar, alias, close, place = composer.scalar, composer.alias, composer.close, composer.place
        documents = 0
        while True:
            event = get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                place(*scalar(event), event)
            elif kind is yaml.AliasEvent:
                place(*alias(event), event)
            elif kind in starts:
                composer.open(event)
            elif kind in ends:
                place(*close(event), event)
            elif kind is yaml.StreamEndEvent:
                break
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise yaml.composer.ComposerError(
                        None, None, "a second YAML document (after ---); a spec is one document", event.start_mark)
            # else: the stream's start, a document's end
        return composer.root
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


def yaml_type(value: Any) -> str:
    """What a value read from YAML is, as a message names it: ``mapping``, ``string 'x'``, ``int 3``."""
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, str):
        return f"string {shown_value(value)}"
    if value is None:
        return "null"
    return f"{type(value).__name__} {shown_value(value)}"


# ---------------------------------------------------------------- positions in the YAML


def dotted(loc: tuple) -> str:
    """A field's path as the errors name it: ``tasks.worker.hosts[0]``."""
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def shown_dotted(loc: tuple) -> str:
    """``dotted(loc)`` with each key from the input shown bounded and escaped (a key may be
    anything: 100,000 characters, terminal escapes)."""
    return dotted(tuple(p if isinstance(p, int) or (isinstance(p, str) and len(p) <= 40 and p.isprintable())
                        else shown_value(p if isinstance(p, str) else str(p), 40) for p in loc))


def _along(root: Optional[yaml.Node], loc: tuple) -> Iterator[tuple[int, yaml.Node]]:
    """The YAML nodes along loc, each with its line (a mapping entry's: its key's), as far as the
    YAML has them."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            entry = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(part)), None)
            if entry is None:
                return
            line, node = entry[0].start_mark.line, entry[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            return
        yield line, node


def line_of(root: Optional[yaml.Node], loc: tuple) -> str:
    """``:LINE`` of the deepest YAML node along loc (the key itself for mapping entries)."""
    line = None
    for line, _ in _along(root, loc):
        pass
    return f":{line + 1}" if line is not None else ""


def node_at(root: Optional[yaml.Node], loc: tuple) -> Optional[yaml.Node]:
    """The YAML node at loc (None: the YAML has nothing there)."""
    node, depth = root, 0
    for depth, (_, node) in enumerate(_along(root, loc), 1):
        pass
    return node if depth == len(loc) else None
