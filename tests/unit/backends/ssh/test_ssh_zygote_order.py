"""Which ssh hosts get a fork server for the run, and what their agents are asked to start
(launcher/backends/ssh/zygote.py ``order``): a host whose tasks are Python that uses TensorFlow, in
the environment its tasks share (no task's own variable, room for them); a hot spare (no task)
too, for its standbys, as the plan's first such task; none for a command it would not serve, nor
with ``restart.warm_standby: false``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from launcher.backends.ssh.zygote import order
from launcher.backends.ssh.backend import SSHBackend
from launcher.contract import envnames
from launcher.loader.load import parse_spec
from launcher.plan.build import build_plan


def plan_of(tmp_path: Path, entrypoint: str, hosts: str = "h1, h2"):
    spec = parse_spec(textwrap.dedent(f"""\
        name: t
        backend: ssh
        strategy: multi_worker_mirrored
        entrypoint: {entrypoint}
        env: {{KEEP_ME: "1"}}
        hosts: [{', '.join(f'{{name: {h}, ssh: {h}}}' for h in hosts.split(', '))}]
        tasks: {{worker: 2}}
        """))
    return build_plan(spec, SSHBackend.place(spec))


def test_a_host_of_tensorflow_tasks_gets_one_with_their_shared_environment(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    (tmp_path / "plain.py").write_text("print('no framework')\n")
    pool = SimpleNamespace(zygote_cwd=tmp_path, zygote_tasks=(), stop_grace=3.0, keep_warm=0.0, hosts={}, zygote_again={})
    got = order(pool, plan_of(tmp_path, f"[{sys.executable}, -u, train.py]"), "h2")
    assert (got["argv"], got["imports"], got["grace"]) == ([sys.executable, "-u"], ["tensorflow"], 3.0)
    assert got["env"]["KEEP_ME"] == "1" and envnames.ZYGOTE_PAD in got["env"]
    assert "TF_CONFIG" not in got["env"] and not any(k == envnames.TASK for k in got["env"])
    assert "keep_warm" not in got  # (it ends with the run)
    pool.keep_warm = 30.0  # ssh.keep_warm
    assert order(pool, plan_of(tmp_path, f"[{sys.executable}, -u, train.py]"), "h2")["keep_warm"] == 30.0
    pool.keep_warm = 0.0
    assert order(pool, plan_of(tmp_path, f"[{sys.executable}, plain.py]"), "h1") is None  # (nothing to import)
    assert order(pool, plan_of(tmp_path, "[bash, run.sh]"), "h1") is None
    off = SimpleNamespace(zygote_cwd=None, zygote_tasks=(), stop_grace=3.0, keep_warm=0.0, hosts={}, zygote_again={})  # warm_standby: false
    assert order(off, plan_of(tmp_path, f"[{sys.executable}, train.py]"), "h1") is None


def test_a_hot_spare_gets_one_for_its_standbys_also_when_probed_alone_later(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    pool = SimpleNamespace(zygote_cwd=tmp_path, zygote_tasks=(), stop_grace=3.0, keep_warm=0.0, hosts={}, zygote_again={})
    plan = plan_of(tmp_path, f"[{sys.executable}, -m, worker]")
    assert order(pool, plan, "h9")["imports"] == ["tensorflow", "tensorflow_datasets", "tf_keras"]
    alone = plan.__class__(name=plan.name, strategy=plan.strategy, backend="ssh", tasks=(), hosts=())
    assert order(pool, alone, "h9")["argv"] == [sys.executable]  # (the last plan's tasks, kept)


def test_a_host_whose_keeper_ended_asks_for_the_new_server_on_the_old_socket(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    pool = SimpleNamespace(zygote_cwd=tmp_path, zygote_tasks=(), stop_grace=3.0, keep_warm=0.0, hosts={},
                           zygote_again={"h2": "/tmp/tfcluster-zygote-ab12/z.sock"})
    plan = plan_of(tmp_path, f"[{sys.executable}, train.py]")
    assert order(pool, plan, "h2")["socket"] == "/tmp/tfcluster-zygote-ab12/z.sock"
    assert "socket" not in order(pool, plan, "h1")  # (only the host whose keeper ended)
