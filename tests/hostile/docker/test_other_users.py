"""docker as root with an image whose USER is a name (docs/concepts/trust.md, "Other users of the
machine"): the run dir and the state dir are given to that user's uid, looked up in the image's own
/etc/passwd, never opened to everyone (mode 1777, where any local user could plant a checkpoint
every later run resumes from); the next run takes them as its own; a second real user
(tests/support/otheruser.py) reads nothing of the run's."""

from __future__ import annotations

import io
import os
import stat

import pytest

from tests.support.docker_helpers import docker_spec, latest_run_dir, tfcluster_at_repo
from tests.support.otheruser import other_can_read

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]

NAMED = "tfcluster-test-named-user:1"
# The worker image's user (docker/Dockerfile: useradd tfcluster, uid WORKER_UID) named, not numbered.
DOCKERFILE = "FROM {image}\nUSER tfcluster\n"
TASK = ("import os, pathlib; p = pathlib.Path(os.environ['TFCLUSTER_STATE_DIR']) / ('by-' + os.uname().nodename); "
        "p.write_text(str(os.getuid()))")


@pytest.fixture(scope="module")
def named_image(docker_engine, worker_image) -> str:
    client = docker_engine.client()
    dockerfile = DOCKERFILE.format(image=worker_image).encode()
    for _ in client.api.build(fileobj=io.BytesIO(dockerfile), tag=NAMED, rm=True, decode=True, network_mode="none"):
        pass
    return NAMED


def test_a_named_image_user_gets_the_dirs_by_uid_and_nothing_is_open_to_all(base, mallory, docker_engine,
                                                                           worker_image, named_image):
    if os.geteuid() != 0:
        pytest.skip("the dirs are given to the containers' user only as root")
    uid = int(docker_engine.client().containers.run(worker_image, ["id", "-u", "tfcluster"], remove=True).strip())
    assert uid != mallory.pw_uid  # (else the second user would be the containers' user)
    spec = docker_spec(base, docker_engine.url, f"python -c {TASK!r}", image=named_image)  # runs/ reachable by all
    for attempt in (1, 2):  # the second run takes the dirs the first gave away as its own
        res = tfcluster_at_repo("up", str(spec), "--plain", timeout=600)
        assert res.returncode == 0, (attempt, res.stderr[-3000:])
        run, state = latest_run_dir(spec), spec.parent / "runs" / "dk" / "state"
        for d in (run, state):
            st = d.stat()
            assert st.st_uid == uid, (d, st.st_uid)
            assert stat.S_IMODE(st.st_mode) == 0o700, (d, oct(st.st_mode))
        written = sorted(p.read_text() for p in state.iterdir() if p.name.startswith("by-"))
        assert written and set(written) == {str(uid)}, written
    # The second real user reaches runs/ but reads nothing of the run's, nor of its state.
    for path in (run / "plan.json", run / "events.jsonl", *state.iterdir()):
        assert other_can_read(path) == 13, path
    for dirpath, dirnames, _ in os.walk(spec.parent / "runs"):
        for name in dirnames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert stat.S_ISLNK(mode) or not mode & 0o002, (dirpath, name, oct(mode))  # (latest: a symlink)
