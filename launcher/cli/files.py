"""``tfcluster compose``, ``export`` and ``image``: the spec as a file for another system (launcher/export/),
and the worker image of the installed tfcluster."""

from __future__ import annotations

import argparse

from launcher.errors import EXIT_OK
from launcher.errors import LaunchError, SpecError
from launcher.cli.common import load
from launcher.ui.console import Console


def compose(args: argparse.Namespace, console: Console) -> int:
    from launcher.export.compose import write_compose

    loaded, plan = load(args.spec, console)
    written = write_compose(loaded, args.output, image=args.image)
    if written is not None:
        console.info(f"wrote {written} ({len(plan.tasks)} services); run: docker compose -f {written} up "
                     f"--abort-on-container-exit --exit-code-from {plan.success_task.replace(':', '-')}")
    return EXIT_OK


def export(args: argparse.Namespace, console: Console) -> int:
    from launcher.export.write import export as write

    loaded, _plan = load(args.spec, console)
    result = write(loaded, args.to, args.output, image=args.image, strict=args.strict)
    for note in result.notes:
        console.info(note)
    for path in result.written:
        console.info(f"wrote {path}")
    return EXIT_OK


def image(args: argparse.Namespace, console: Console) -> int:
    """``tfcluster image build|print``: tfcluster's worker image from the installed tfcluster. build
    runs the docker CLI (what a docker compose user has) on the context launcher/image/ makes."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from launcher import image as workerimage

    if args.action == "print":
        if args.context:
            made = workerimage.make_context(Path(args.context))
            console.info(f"wrote the worker image's build context to {made} (tfcluster "
                         f"{workerimage.launcher.__version__}); build it: docker build -t {args.tag} {made}")
        else:
            print(workerimage.dockerfile_text(), end="")
        return EXIT_OK
    if args.context:
        raise SpecError("image build: --context is for image print (write the context); build makes its own")
    argv = ["docker"] + (["-H", args.engine] if args.engine else []) + ["build", "-t", args.tag]
    for item in args.build_arg:
        key, sep, _value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--build-arg {item!r}: give KEY=VALUE")
        argv += ["--build-arg", item]
    if args.base_image:
        argv += ["--build-arg", f"BASE_IMAGE={args.base_image}"]
    if args.network:
        argv += ["--network", args.network]
    if shutil.which("docker") is None:
        raise LaunchError("image build runs the docker CLI, which is not on PATH; install Docker, or write the "
                          "context with 'tfcluster image print --context DIR' and build it where Docker is")
    with tempfile.TemporaryDirectory(prefix="tfcluster-image-") as tmp:
        context = workerimage.make_context(Path(tmp) / "context")
        console.info(f"building {args.tag} from tfcluster {workerimage.launcher.__version__}'s worker Dockerfile: "
                     + " ".join(argv + ["CONTEXT"]))
        code = subprocess.run(argv + [str(context)]).returncode
    if code != 0:
        raise LaunchError(f"image build: docker build exited {code} (its output is above); fix what it says, or the "
                          "build args (--build-arg, --base-image, --network)")
    console.info(f"built {args.tag}")
    return EXIT_OK
