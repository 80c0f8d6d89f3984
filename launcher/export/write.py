"""Build, validate and write an export: the one entry point ``tfcluster export`` calls.

Exit codes via the raised errors: SpecError (2) for a spec the engine cannot express or an export
that fails validation (the fix is in the spec: a bad accelerator type, a name Kubernetes refuses);
LaunchError (1) when an output file exists that tfcluster did not write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from launcher.errors import SpecError, UserError
from launcher.export.generated import MARKER, check_overwritable, resolve_output, write_atomic
from launcher.spec.model import LoadedSpec
from launcher.export.common import SpecWhere, check_image, container_env, default_output, export_plan, inexpressible
from launcher.export.jobset import jobset_dict, render_jobset
from launcher.export.kube import render_secret, secret_dict, secret_env, secret_path
from launcher.export.tfjob import render_tfjob, tfjob_dict
from launcher.export.validate import (DNS1035_RE, aiplatform_types, validate_custom_job, validate_jobset, validate_tfjob,
                                      validate_vertex_spec)
from launcher.export.vertex import custom_job_dict, render_custom_job_json, render_job_spec_yaml
from launcher.export.vertex import secret_names as vertex_secrets

HEADER = MARKER + " export`"


@dataclass(frozen=True)
class KubeTarget:
    """A Kubernetes job the export writes (TFJob, JobSet): how its document is made from the spec,
    checked against its CRD and rendered, and what the check was (``note``, said; ``checked``, the
    file's header)."""

    kind: str
    make: Callable  # (loaded, image) -> the document
    validate: Callable  # document -> problems
    render: Callable  # (loaded, doc, header, name, beside) -> the file's text
    note: str
    checked: str


KUBERNETES = {  # the targets whose secret env values go into a Secret of their own
    "tfjob": KubeTarget("TFJob", tfjob_dict, validate_tfjob, render_tfjob,
                        "validated against the TFJob CRD schema (training-operator v1.9.0) and its webhook rules",
                        "the training-operator v1.9.0 TFJob CRD schema and its webhook rules"),
    "jobset": KubeTarget("JobSet", jobset_dict, validate_jobset, render_jobset,
                         "validated against the JobSet CRD schema (jobset v0.12.0) and its webhook rules",
                         "the JobSet v0.12.0 CRD schema and its webhook rules"),
}
TARGETS = ("tfjob", "vertex", "jobset")
FIX = {"tfjob": "check the kubernetes: options", "vertex": "check the vertex: options",
       "jobset": "check the kubernetes: options"}
KIND = {"vertex": "CustomJob", **{name: t.kind for name, t in KUBERNETES.items()}}
SUFFIX = {"tfjob": "tfjob.yaml", "vertex": "vertex.yaml", "jobset": "jobset.yaml"}
SECRET_MODE = 0o600


@dataclass
class ExportResult:
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# The Vertex API's own types check the CustomJob only where the [export] extra is installed; without it
# the file says so (its header) as well as stderr, and `export --strict` refuses to write it.
VERTEX_TYPES = "the Vertex API types (google.cloud.aiplatform_v1 CustomJob/CustomJobSpec)"
VERTEX_TYPES_MISSING = "google-cloud-aiplatform is not installed: pip install 'tfcluster[export]'"


@dataclass(frozen=True)
class Checks:
    """What an export was checked with: ``ran`` (each check that ran and passed) and ``skipped``
    (each check that could not run, with why); the file's header states both."""

    ran: tuple[str, ...]
    skipped: tuple[str, ...] = ()


def _invalid(target: str, problems: list[str]) -> SpecError:
    return SpecError(*[f"export --to {target}: the generated {KIND[target]} is invalid: {p}; {FIX[target]}"
                       for p in problems])


def secrets_of(loaded: LoadedSpec, target: str) -> dict[str, str]:
    """The env values a Kubernetes export keeps out of its job's file (empty for Vertex)."""
    if target not in KUBERNETES:
        return {}
    return secret_env(container_env(loaded.spec, export_plan(loaded.spec)))


def build(loaded: LoadedSpec, target: str, image: Optional[str] = None,
          strict: bool = False) -> tuple[dict, Optional[dict], list[str], Checks]:
    """(main document, CustomJob or None, notes, the checks made), validated; raise SpecError when it
    cannot be, and UserError under ``strict`` when a check cannot run here."""
    if target not in TARGETS:
        raise SpecError(f"--to {target}: unknown target; use tfjob, jobset or vertex")
    check_image(image)
    problems = inexpressible(loaded, target)
    spec = loaded.spec
    if target in KUBERNETES and (len(spec.name) > 63 or not DNS1035_RE.fullmatch(spec.name)):
        problems.insert(0, SpecWhere(loaded)(("name",), f"'{spec.name}' cannot name a {KIND[target]} (a DNS-1035 label: "
                                             "lowercase letters, digits and '-', starting with a letter); rename it"))
    if problems:
        raise SpecError(*problems)
    notes: list[str] = []
    kube = KUBERNETES.get(target)
    if kube is not None:
        doc = kube.make(loaded, image)
        problems = kube.validate(doc)
        if problems:
            raise _invalid(target, problems)
        return doc, None, [kube.note], Checks((kube.checked,))
    job = custom_job_dict(loaded, image)
    types = aiplatform_types()
    if types is None and strict:
        raise UserError(f"export --to vertex --strict: cannot check {VERTEX_TYPES}: {VERTEX_TYPES_MISSING}; "
                        "install it, or export without --strict (the file then says the check was skipped)")
    problems = validate_custom_job(job, types) or validate_vertex_spec(job["jobSpec"], types)
    if problems:
        raise _invalid(target, problems)
    if types is None:
        notes.append("skipped the Vertex API type check (google-cloud-aiplatform is not installed: "
                     "pip install 'tfcluster[export]'); tfcluster's own pool checks passed; the file says so too "
                     "(--strict: refuse instead)")
        checks = Checks(("tfcluster's pool rules",), (f"{VERTEX_TYPES}: {VERTEX_TYPES_MISSING}",))
    else:
        notes.append("validated with google.cloud.aiplatform_v1 CustomJob/CustomJobSpec and tfcluster's pool rules")
        checks = Checks(("google.cloud.aiplatform_v1 types", "tfcluster's pool rules"))
    return job["jobSpec"], job, notes, checks


def export(loaded: LoadedSpec, target: str, output: Optional[str] = None, image: Optional[str] = None,
           strict: bool = False) -> ExportResult:
    """Write the export (``-o -``: the YAML to stdout); refuse to clobber files tfcluster did not write.
    ``strict``: refuse (UserError) when a check cannot run here, rather than say so in the file.
    Beside the job's file: Vertex's CustomJob .json; a Kubernetes job's Secret (mode 0600) when the env
    has secret values."""
    doc, job, notes, checks = build(loaded, target, image, strict)
    result = ExportResult(notes=notes)
    suffix = SUFFIX[target]
    secrets = secrets_of(loaded, target)
    if output == "-":
        if secrets:
            raise SpecError(f"-o -: the env's secret values ({', '.join(secrets)}) go into a Secret file of its own "
                            "(mode 0600), which stdout cannot be; give -o PATH")
        print(_render(loaded, target, doc, f"{loaded.spec.name}.{suffix}", None, checks), end="")
        return result
    path = resolve_output(output, default_output(loaded, suffix), f"{loaded.spec.name}.{suffix}")
    files: list[tuple[Path, Optional[str], Optional[int]]] = [(path, None, None)]
    if job is not None:
        json_path = path.with_suffix(".json")
        if json_path == path:
            raise SpecError(f"-o {output}: give the .yaml path; the CustomJob .json is written beside it")
        files.append((json_path, render_custom_job_json(job), None))
    if secrets:
        spath = secret_path(path)
        text = render_secret(HEADER, loaded.path.name, secret_dict(loaded.spec, secrets), path.name, spath.name)
        files.append((spath, text, SECRET_MODE))
        result.notes.append(f"the env's secret values ({', '.join(secrets)}) are in {spath.name} (mode 0600), "
                            f"read by reference (secretKeyRef); apply it before {path.name}")
    for file, _, _ in files:
        check_overwritable(file, named=output is not None and file == path)
    clear = vertex_secrets(doc) if target == "vertex" else []  # (the Vertex API takes env values only)
    if clear:
        result.notes.append(f"{', '.join(clear)} are in clear in the files, as the Vertex API takes them: written "
                            "readable by you alone (0600)")
    beside = files[1][0].name if len(files) > 1 else None
    for file, text, mode in files:
        if text is None:
            text = _render(loaded, target, doc, file.name, beside, checks)
        write_atomic(file, text, SECRET_MODE if clear else mode)
        result.written.append(file)
    return result


def _render(loaded: LoadedSpec, target: str, doc: dict, name: str, beside: Optional[str], checks: Checks) -> str:
    """The job's file; ``beside``: the file written with it (the CustomJob .json, or the Secret)."""
    kube = KUBERNETES.get(target)
    if kube is not None:
        return kube.render(loaded, doc, HEADER, name, beside)
    return render_job_spec_yaml(loaded, doc, HEADER, name, beside, checks.ran, checks.skipped)
