"""The backend contract is two narrow seams (launcher/backends/base.py, docs/architecture.md "The
backend's two seams"): ``Hosts`` and ``Tasks``, each with at most 10 public methods, beside the
kind (``BackendKind``: what a backend answers before a run) and the run's ``Backend`` (the pair).
No class of base.py grows past 10 public methods, nor does any backend's implementation of a
seam; and the use cases (launcher/app/) and the supervisor (launcher/supervise/) read no result
off a backend: they call a seam's method, or read what the kind declares."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from dataclasses import fields
from pathlib import Path

import launcher.backends
from launcher.backends import backend_classes
from launcher.backends.base import Backend, BackendKind, Capabilities, Hosts, StartRequest, Tasks

LAUNCHER = Path(__file__).resolve().parents[3] / "launcher"
MOST = 10
# What a Backend (the pair) may be asked for besides its two seams: declarations of its kind,
# and the one close. Anything else read off it would be a result handed back as an attribute.
DECLARED = {"capabilities", "name", "detach_note", "close", "kind"}
SEAMS = {"hosts": Hosts, "tasks": Tasks}


def public_methods(cls: type) -> list[str]:
    """The public callables and properties a class offers (its own and inherited, not object's)."""
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in vars(object)
                  and (callable(getattr(cls, n, None)) or isinstance(getattr(cls, n, None), property))
                  and not isinstance(getattr(cls, n, None), type))


def test_every_public_class_of_base_has_at_most_ten_public_methods():
    tree = ast.parse((LAUNCHER / "backends" / "base.py").read_text(encoding="utf-8"))
    counted = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            counted[node.name] = [f.name for f in node.body
                                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("_")]
    assert {"BackendKind", "Hosts", "Tasks", "Backend", "TaskHandle"} <= set(counted)
    over = {name: methods for name, methods in counted.items() if len(methods) > MOST}
    assert not over, f"more than {MOST} public methods (split the class): {over}"


def _seam_implementations() -> list[type]:
    for info in pkgutil.walk_packages(launcher.backends.__path__, "launcher.backends."):
        importlib.import_module(info.name)
    found, todo = [], [Hosts, Tasks]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("launcher.backends."):
                found.append(sub)
            todo.append(sub)
    return found


def test_each_backend_implements_each_seam_in_one_narrow_class():
    made = _seam_implementations()
    for kind in backend_classes():
        package = kind.__module__.rpartition(".")[0] if kind.__module__.count(".") > 2 else kind.__module__
        for seam in (Hosts, Tasks):
            own = [c for c in made if issubclass(c, seam) and c.__module__.startswith(package)]
            assert len(own) == 1, f"backend {kind.name}: one {seam.__name__} class, found {own}"
            wide = public_methods(own[0])
            assert len(wide) <= MOST, f"{own[0].__name__}: {len(wide)} public methods {wide}"


def _backend_reads(rel: str, text: str) -> list[str]:
    """Each place in module ``rel`` (its source ``text``) that reads off a backend (a name
    ``backend`` or an attribute ``.backend``) anything but a seam's method, called, or what its
    kind declares."""
    tree = ast.parse(text, rel)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def is_backend(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "backend") or \
            (isinstance(node, ast.Attribute) and node.attr == "backend" and not _is_plan_like(node.value))

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr",
                                                                                               "vars", "hasattr"):
            if node.args and (is_backend(node.args[0]) or _is_seam(node.args[0], is_backend)):
                out.append(f"{rel}:{node.lineno}: {node.func.id}() on a backend")
        if not (isinstance(node, ast.Attribute) and is_backend(node.value)):
            continue
        if node.attr in DECLARED:
            continue
        if node.attr not in SEAMS:
            out.append(f"{rel}:{node.lineno}: backend.{node.attr}")
            continue
        use = parent.get(node)
        method = use.attr if isinstance(use, ast.Attribute) else None
        called = isinstance(parent.get(use), ast.Call) and parent[use].func is use
        if method not in public_methods(SEAMS[node.attr]) or not called:
            out.append(f"{rel}:{node.lineno}: backend.{node.attr}.{method or '?'} (not a call of a seam's method)")
    return out


def _is_plan_like(node: ast.AST) -> bool:
    """``plan.backend``, ``spec.backend``, ``view.backend``: the backend's name in data, not a backend."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name in ("plan", "spec", "view", "loaded", "run", "info") or name.endswith(("plan", "spec"))


def _is_seam(node: ast.AST, is_backend) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in SEAMS and is_backend(node.value)


def test_app_and_supervise_read_no_result_off_a_backend():
    found = [o for package in ("app", "supervise") for p in sorted((LAUNCHER / package).rglob("*.py"))
             for o in _backend_reads(str(p.relative_to(LAUNCHER.parent)), p.read_text(encoding="utf-8"))]
    assert found == [], ("a result crosses as a backend's attribute (return it from a seam's method "
                         "instead):\n" + "\n".join(found))
    calls = sum(p.read_text(encoding="utf-8").count(f"backend.{seam}.") for package in ("app", "supervise")
                for p in (LAUNCHER / package).rglob("*.py") for seam in SEAMS)
    assert calls > 20, f"the scan saw {calls} seam calls: is the backend still called ``backend`` there?"


def test_the_attribute_rule_sees_an_offence():
    """The scan itself can fail: a use case that reads a result off the backend or its seams."""
    text = ("def f(backend, self):\n    backend.absent\n    getattr(backend, 'plan')\n    x = backend.hosts.probe\n"
            "    self.backend.tasks.started\n    backend.hosts.probe(1)\n    plan.backend\n    backend.capabilities.stacks\n")
    got = _backend_reads("launcher/app/_sample_offence.py", text)
    assert got == ["launcher/app/_sample_offence.py:2: backend.absent",
                   "launcher/app/_sample_offence.py:3: getattr() on a backend",
                   "launcher/app/_sample_offence.py:4: backend.hosts.probe (not a call of a seam's method)",
                   "launcher/app/_sample_offence.py:5: backend.tasks.started (not a call of a seam's method)"], got


def test_the_pair_declares_what_its_kind_does():
    class Kind(BackendKind):
        name = "k"
        capabilities = Capabilities(stacks=True)
        detach_note = "stay up"

    class H(Hosts):
        closed = False

        def allocate(self, spec):
            raise AssertionError

        def close(self):
            self.closed = True

    class T(Tasks):
        def start(self, request, on_line):
            raise AssertionError

        def close(self):
            H.closed_after = hosts.closed

    hosts = H()
    pair = Backend(Kind, hosts, T())
    assert (pair.name, pair.capabilities.stacks, pair.detach_note) == ("k", True, "stay up")
    pair.close()
    assert hosts.closed and H.closed_after is False  # the tasks' side first, then the hosts'


# ---------------------------------------------------------------- the typed start


def _signature(func) -> list[str]:
    import inspect

    return list(inspect.signature(func).parameters)


def test_every_backend_starts_from_a_request_and_promotes_with_one():
    """``Tasks.start(request, on_line)`` and ``Tasks.promote(handle, request)``, in the contract and
    in every backend: what decides a start (standby, fork) is a field of the request, not a flag
    in the environment."""
    tasks = [Tasks] + [c for c in _seam_implementations() if issubclass(c, Tasks)]
    assert len(tasks) == 5, tasks  # the contract and the four backends'
    for cls in tasks:
        assert _signature(cls.start) == ["self", "request", "on_line"], cls
        assert _signature(cls.promote) == ["self", "handle", "request"], cls
    assert {f.name for f in fields(StartRequest)} == {"task", "env", "standby", "fork"}


def _env_flag_reads(rel: str, text: str) -> list[str]:
    """Each place in ``rel`` that reads the standby flag out of an environment, or sets it in one
    (``env.get(envnames.STANDBY)``, ``env[envnames.STANDBY]``, ``{envnames.STANDBY: "1"}``)."""
    out = []
    for node in ast.walk(ast.parse(text, rel)):
        named = [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == "STANDBY"
                 and isinstance(n.value, ast.Name) and n.value.id == "envnames"]
        if not named:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and node.args[0] in named:
            out.append(f"{rel}:{node.lineno}: reads {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and node.slice in named:
            out.append(f"{rel}:{node.lineno}: reads {ast.unparse(node)}")
        elif isinstance(node, ast.Dict) and any(k in named for k in node.keys):
            out.append(f"{rel}:{node.lineno}: sets the standby flag in an environment")
    return out


def test_no_backend_or_supervisor_passes_the_standby_flag_through_the_environment():
    """The supervisor asks for a standby with ``StartRequest.standby``; only the request itself
    (``told``) writes the variable the task reads. The scan can fail (see the sample)."""
    found = [o for package in ("backends", "supervise") for p in sorted((LAUNCHER / package).rglob("*.py"))
             if p.name != "process.py"
             for o in _env_flag_reads(str(p.relative_to(LAUNCHER.parent)), p.read_text(encoding="utf-8"))]
    assert found == [], "\n".join(found)
    sample = ('if env.get(envnames.STANDBY) == "1":\n    pass\nx = env[envnames.STANDBY]\n'
              'start(task, {**env, envnames.STANDBY: "1"})\nKEEP = {envnames.STANDBY_ENV}\n')
    assert sorted(line.split(":")[1] for line in _env_flag_reads("s.py", sample)) == ["1", "3", "4"]


def test_a_request_tells_the_task_what_it_reads_and_nothing_else():
    from launcher.contract import envnames
    from launcher.plan.build import PlannedTask

    task = PlannedTask(type="worker", index=0, host="h", address="h", port=1, command=("python", "t.py"))
    env = {envnames.RESTART_COUNT: "2"}
    cold = StartRequest(task, env)
    assert cold.told() == env and cold.told("/p.json") == env and cold.key == "worker:0"
    standby = StartRequest(task, env, standby=True, fork=True)
    assert standby.told() == {**env, envnames.STANDBY: "1"}
    assert standby.told("/run/standby/w.json") == {**env, envnames.STANDBY: "1", envnames.STANDBY_ENV: "/run/standby/w.json"}
    assert env == {envnames.RESTART_COUNT: "2"}  # the request's env is not changed by telling


def test_process_info_is_typed_and_written_in_the_records_shape():
    """What ``TaskHandle.info()`` returns is typed, and its ``to_json`` is launcher.json's task entry
    as every tfcluster wrote it (``down`` of an older record reads the same keys)."""
    from launcher.backends.docker.containers import ContainerProcess
    from launcher.backends.process import LocalProcess, ProcessInfo, from_record
    from launcher.backends.slurm.step import SrunProcess
    from launcher.backends.ssh.task import SSHProcess

    local = LocalProcess(pid=10, pgid=10, start_time=55)
    assert local.to_json() == {"pid": 10, "pgid": 10, "start_time": 55}
    assert (local.local_pid(), local.local_group()) == (10, 10)
    ssh = SSHProcess(ssh_host="h2", remote_pidfile="/r/pids/w.0", remote_run_dir="/r")
    assert ssh.to_json() == {"ssh_host": "h2", "remote_pidfile": "/r/pids/w.0", "remote_run_dir": "/r"}
    assert ssh.local_pid() is None and ssh.local_group() is None  # a pid there is none of this machine's
    box = ContainerProcess(container="c", container_id="abc", network="n", engine="unix:///s")
    assert set(box.to_json()) == {"container", "container_id", "network", "engine"} and box.local_group() is None
    step = SrunProcess(pid=7, pgid=7, start_time=None, slurm_job="12", slurm_step="worker-0.1", node="n1")
    assert list(step.to_json()) == ["pid", "pgid", "start_time", "slurm_job", "slurm_step", "node"]
    assert step.local_group() == 7 and isinstance(ProcessInfo().to_json(), dict)
    # Read back from a record (any version's): a local process, or None where the entry names none.
    assert from_record(local.to_json()) == local and from_record(step.to_json()) == LocalProcess(7, 7, None)
    assert from_record(ssh.to_json()) is None
    assert from_record({"pid": True, "pgid": 3}) is None and from_record({"pid": "3", "pgid": 3}) is None
