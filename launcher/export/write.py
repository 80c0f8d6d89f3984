"""Build, validate and write an export: the one entry point ``tfcluster export`` calls.

Exit codes via the raised errors: SpecError (2) for a spec the engine cannot express or an export
that fails validation (the fix is in the spec: a bad accelerator type, a name Kubernetes refuses);
LaunchError (1) when an output file exists that tfcluster did not write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from launcher.errors import SpecError
from launcher.export.generated import MARKER, check_overwritable, resolve_output, write_atomic
from launcher.spec.model import LoadedSpec
from launcher.export.common import SpecWhere, check_image, default_output, inexpressible
from launcher.export.tfjob import render_tfjob, tfjob_dict
from launcher.export.validate import DNS1035_RE, aiplatform_types, validate_custom_job, validate_tfjob, validate_vertex_spec
from launcher.export.vertex import custom_job_dict, render_custom_job_json, render_job_spec_yaml

HEADER = MARKER + " export`"
TARGETS = ("tfjob", "vertex")
FIX = {"tfjob": "check the kubernetes: options", "vertex": "check the vertex: options"}


@dataclass
class ExportResult:
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _invalid(target: str, problems: list[str]) -> SpecError:
    what = "TFJob" if target == "tfjob" else "CustomJob"
    return SpecError(*[f"export --to {target}: the generated {what} is invalid: {p}; {FIX[target]}" for p in problems])


def build(loaded: LoadedSpec, target: str, image: Optional[str] = None) -> tuple[dict, Optional[dict], list[str]]:
    """(main document, CustomJob or None, notes), validated; raise SpecError when it cannot be."""
    if target not in TARGETS:
        raise SpecError(f"--to {target}: unknown target; use tfjob or vertex")
    check_image(image)
    problems = inexpressible(loaded, target)
    spec = loaded.spec
    if target == "tfjob" and (len(spec.name) > 63 or not DNS1035_RE.fullmatch(spec.name)):
        problems.insert(0, SpecWhere(loaded)(("name",), f"'{spec.name}' cannot name a TFJob (a DNS-1035 label: lowercase "
                                          "letters, digits and '-', starting with a letter); rename it"))
    if problems:
        raise SpecError(*problems)
    notes: list[str] = []
    if target == "tfjob":
        doc = tfjob_dict(loaded, image)
        problems = validate_tfjob(doc)
        if problems:
            raise _invalid(target, problems)
        notes.append("validated against the TFJob CRD schema (training-operator v1.9.0) and its webhook rules")
        return doc, None, notes
    job = custom_job_dict(loaded, image)
    types = aiplatform_types()
    problems = validate_custom_job(job, types) or validate_vertex_spec(job["jobSpec"], types)
    if problems:
        raise _invalid(target, problems)
    if types is None:
        notes.append("skipped the Vertex API type check (google-cloud-aiplatform is not installed: "
                     "pip install 'tfcluster[export]'); tfcluster's own pool checks passed")
    else:
        notes.append("validated with google.cloud.aiplatform_v1 CustomJob/CustomJobSpec and tfcluster's pool rules")
    return job["jobSpec"], job, notes


def export(loaded: LoadedSpec, target: str, output: Optional[str] = None, image: Optional[str] = None) -> ExportResult:
    """Write the export (``-o -``: the YAML to stdout); refuse to clobber files tfcluster did not write."""
    doc, job, notes = build(loaded, target, image)
    result = ExportResult(notes=notes)
    suffix = "tfjob.yaml" if target == "tfjob" else "vertex.yaml"
    if output == "-":
        name = f"{loaded.spec.name}.{suffix}"
        print(_render(loaded, target, doc, name, None), end="")
        return result
    path = resolve_output(output, default_output(loaded, suffix), f"{loaded.spec.name}.{suffix}")
    files = [(path, None)]
    if job is not None:
        json_path = path.with_suffix(".json")
        if json_path == path:
            raise SpecError(f"-o {output}: give the .yaml path; the CustomJob .json is written beside it")
        files.append((json_path, render_custom_job_json(job)))
    for file, _ in files:
        check_overwritable(file, named=output is not None and file == path)
    for file, text in files:
        if text is None:
            text = _render(loaded, target, doc, file.name, files[1][0].name if job is not None else None)
        write_atomic(file, text)
        result.written.append(file)
    return result


def _render(loaded: LoadedSpec, target: str, doc: dict, name: str, json_name: Optional[str]) -> str:
    if target == "tfjob":
        return render_tfjob(loaded, doc, HEADER, name)
    return render_job_spec_yaml(loaded, doc, HEADER, name, json_name)
