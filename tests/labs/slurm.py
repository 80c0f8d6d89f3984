"""A real Slurm cluster on this machine, for the slurm backend's tests and bench/slurm.py.

On top of the ssh lab's network (tests/labs/ssh.py: namespaces joined by a bridge; no sshd here):
one ``munged`` with its own socket and key, ``slurmctld`` on this machine listening on the lab's
gateway address, and one ``slurmd -N n<i>`` per namespace host, started with
``nsenter --net=/run/netns/<ns>`` (``ip netns exec`` remounts /sys and slurmd 22.05 then fails: "No
filesystem mounted on /sys/fs/cgroup"). Every file -- slurm.conf, state, spool, logs, the munge socket -- lives
under the lab's root, and clients find the config through ``SLURM_CONF`` (see ``env()``), so the
machine's own /etc/slurm is never read or written.

Every node declares ``gpus`` fake GPUs of type ``tfake`` (``GresTypes=gpu``, ``Gres=gpu:tfake:N``,
gres.conf ``Type=tfake File=`` device nodes the lab makes): Slurm grants them to steps and sets each step's CUDA_VISIBLE_DEVICES as on a
GPU cluster (checked with srun: two ``--exact --gpus-per-task=1`` steps on one node get 0 and 1; two
``--overlap`` steps both get 0, since overlapping steps share GRES too; a step without a GPU request
sees all the job's GPUs, one with ``--gres=none`` has CUDA_VISIBLE_DEVICES unset).

The nodes share this machine's file system (only the network differs), so a step runs the same
Python and sees the same work tree as the launcher -- except ``private``: each slurmd runs in
its own mount namespace (``unshare --mount``) with a tmpfs of its own there, so a workdir or run
dir under ``private`` is this machine's alone, as a login node's local disk would be.

``stop()`` ends every daemon it started (by the pids it holds), then the ssh lab kills whatever is
left in the namespaces (``ip netns pids``: slurmstepd and the tasks), never by name.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.labs.ssh import Lab, sh

SUBNET = os.environ.get("TFCLUSTER_SLURM_SUBNET", "10.232.0")
PREFIX = os.environ.get("TFCLUSTER_SLURM_PREFIX", "tfsl")
CTLD_PORT = int(os.environ.get("TFCLUSTER_SLURM_PORT", "6917"))  # slurmd listens on the next one
PARTITION = "debug"
URGENT = "urgent"  # its jobs preempt PARTITION's
GRACE = 30  # s between the preemption's SIGTERM and the cancel
GPU_TYPE = "tfake"  # the fake GPUs' type: a job may ask --gres=gpu:tfake:N (untyped requests match too)
TOOLS = (("slurmctld", "slurmctld"), ("slurmd", "slurmd"), ("sbatch", "slurm-client"),
         ("srun", "slurm-client"), ("squeue", "slurm-client"), ("scontrol", "slurm-client"),
         ("scancel", "slurm-client"), ("sinfo", "slurm-client"), ("munged", "munge"), ("nsenter", "util-linux"),
         ("unshare", "util-linux"))


def have_prereqs() -> Optional[str]:
    """None if the lab can run here, else why not (the fix: tests/setup/slurm.sh)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, slurmd)"
    for tool, pkg in TOOLS:
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"'{tool}' not found; install Debian package {pkg} (tests/setup/slurm.sh)"
    return None


def _which(tool: str) -> str:
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or tool


@dataclass
class SlurmLab:
    root: Path
    count: int = 3
    cpus: int = 4
    gpus: int = 2  # fake GPUs per node (gres.conf File= device files under root/dev); 0: no GresTypes
    gpu_type: str = GPU_TYPE  # their type (Gres=gpu:<type>:N), as on real clusters; "" untyped
    net: Lab = field(init=False)
    munged: Optional[subprocess.Popen] = None
    slurmctld: Optional[subprocess.Popen] = None
    slurmd: dict = field(default_factory=dict)  # node name -> Popen

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.net = Lab(self.root / "net", count=self.count, prefix=PREFIX, subnet=SUBNET, sshd=False)

    # ------------------------------------------------------------------ facts

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def nodes(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.count + 1)]

    @property
    def private(self) -> Path:
        """A directory the nodes do not share with this machine (each sees its own empty tmpfs)."""
        return self.root / "private"

    def node_address(self, node: str) -> str:
        return f"{SUBNET}.{10 + int(node[1:])}"

    def netns(self, node: str) -> str:
        return f"{PREFIX}h{node[1:]}"

    def env(self) -> dict[str, str]:
        """The environment a Slurm client (and tfcluster) needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def bridge_ok(self) -> Optional[str]:
        """None if the lab's network is intact, else what is missing (checked before each test)."""
        have = sh("ip", "netns", "list", check=False).stdout.decode()
        names = {line.split()[0] for line in have.splitlines() if line.split()}
        missing = [ns for ns in [self.net.switch] + [self.netns(n) for n in self.nodes] if ns not in names]
        if missing:
            return f"network namespaces gone: {', '.join(missing)}"
        if sh("ip", "-n", self.net.switch, "link", "show", "br0", check=False).returncode != 0:
            return f"bridge br0 in {self.net.switch} is gone"
        for node, proc in self.slurmd.items():
            if proc.poll() is not None:
                return f"slurmd of {node} exited ({proc.returncode}); see {self.root / f'slurmd-{node}.log'}"
        if self.slurmctld is None or self.slurmctld.poll() is not None:
            return f"slurmctld is not running; see {self.root / 'slurmctld.log'}"
        return None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> "SlurmLab":
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.net.start()
        self._start_munge()
        self._write_conf()
        for sub in ("state", "spool"):
            (self.root / sub).mkdir(exist_ok=True)
        self.slurmctld = self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        Lab.wait_port(self.net.gateway, CTLD_PORT, timeout=timeout)
        self.private.mkdir(exist_ok=True)
        for node in self.nodes:
            # exec keeps one pid from nsenter to slurmd (the Popen's pid is slurmd's).
            self.slurmd[node] = self._spawn(
                f"slurmd-{node}",
                ["nsenter", f"--net=/run/netns/{self.netns(node)}", "--",
                 _which("unshare"), "--mount", "--propagation", "private", "--",
                 "/bin/sh", "-c", 'mount -t tmpfs -o size=1m tfsl-private "$0" && exec "$@"', str(self.private),
                 _which("slurmd"), "-D", "-N", node, "-f", str(self.conf)],
            )
        self.wait_idle(timeout)
        return self

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.out", "ab")
        try:
            return subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **self.env()}, start_new_session=True)
        finally:
            log.close()

    def _start_munge(self) -> None:
        mdir = self.root / "munge"
        mdir.mkdir(mode=0o700, exist_ok=True)
        key = mdir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(128))
        os.chmod(key, 0o400)
        self.munged = self._spawn("munged", [
            _which("munged"), "-F", "-f", f"--socket={self.socket}", f"--key-file={key}",
            f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
            f"--seed-file={mdir / 'munged.seed'}",
        ])
        end = time.monotonic() + 15
        while not self.socket.exists():
            if self.munged.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"munged did not start: {(mdir / 'munged.log').read_text(errors='replace')[-500:]}"
                                   if (mdir / "munged.log").exists() else "munged did not start")
            time.sleep(0.05)

    @property
    def socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def gpu_files(self) -> list[Path]:
        """The device files every node's gres.conf names, GPU index order (the nodes share them:
        only the network differs, and Slurm only stats them)."""
        return [self.root / "dev" / f"nvidia{i}" for i in range(self.gpus)]

    def _write_gres(self) -> None:
        """gres.conf next to slurm.conf (slurmd looks there): ``Name=gpu File=...`` per node.
        The files are character devices (1,3: /dev/null's numbers) as NVIDIA's are: with regular
        files slurmd 22.05 logs "is not a valid character or block device, fix your gres.conf"
        and steps get an empty CUDA_VISIBLE_DEVICES. With TaskPlugin=task/none nothing
        constrains them; slurmd sets each step's CUDA_VISIBLE_DEVICES from the indices it granted."""
        (self.root / "dev").mkdir(exist_ok=True)
        for path in self.gpu_files:
            if not path.exists():
                os.mknod(path, stat.S_IFCHR, os.makedev(1, 3))
                os.chmod(path, 0o666)
        files = f"{self.root / 'dev'}/nvidia[0-{self.gpus - 1}]" if self.gpus > 1 else str(self.gpu_files[0])
        kind = f" Type={self.gpu_type}" if self.gpu_type else ""
        (self.root / "gres.conf").write_text(f"NodeName=n[1-{self.count}] Name=gpu{kind} File={files}\n")

    def _write_conf(self) -> None:
        first, last = 11, 10 + self.count
        r = self.root
        if self.gpus:
            self._write_gres()
        self.conf.write_text("\n".join([
            "ClusterName=tfclab",
            f"SlurmctldHost={socket.gethostname()}({self.net.gateway})",
            f"SlurmctldPort={CTLD_PORT}",
            f"SlurmdPort={CTLD_PORT + 1}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            *(["GresTypes=gpu"] if self.gpus else []),
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "MinJobAge=300",
            "KillWait=5",
            "InactiveLimit=0",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd-%n.log'}",
            f"NodeName=n[1-{self.count}] NodeAddr={SUBNET}.[{first}-{last}] CPUs={self.cpus} RealMemory=1000 "
            + (f"Gres=gpu:{self.gpu_type + ':' if self.gpu_type else ''}{self.gpus} " if self.gpus else "")
            + "State=UNKNOWN",
            # Jobs of URGENT preempt those of PARTITION: SIGTERM to every step at once, the job
            # cancelled GRACE s later (a site's preemption, for the graceful-preemption tests).
            "PreemptType=preempt/partition_prio",
            "PreemptMode=CANCEL",
            f"PartitionName={PARTITION} Nodes=n[1-{self.count}] Default=YES MaxTime=INFINITE State=UP "
            f"PriorityTier=1 GraceTime={GRACE}",
            f"PartitionName={URGENT} Nodes=n[1-{self.count}] MaxTime=INFINITE State=UP PriorityTier=10 "
            "PreemptMode=OFF",
            "",
        ]))

    def wait_idle(self, timeout: float) -> None:
        """Until every node is idle (registered and free)."""
        end = time.monotonic() + timeout
        last = ""
        while True:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            last = out.stdout.strip()
            states = dict(line.split() for line in last.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in self.nodes):
                return
            if time.monotonic() > end:
                raise RuntimeError(f"slurm nodes not idle within {timeout:g} s: {last or out.stderr.strip()}")
            time.sleep(0.2)

    def run(self, *argv: str, timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (text output)."""
        proc = subprocess.run([_which(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env()})
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def jobs(self) -> list[str]:
        """Ids of jobs not yet finished (pending, running, completing)."""
        out = self.run("squeue", "-h", "-o", "%i|%T", check=False).stdout
        return [line.split("|")[0] for line in out.splitlines()
                if line.strip() and line.split("|")[1] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                                           "SUSPENDED")]

    def node_pids(self, node: str) -> list[int]:
        """Pids in the node's network namespace other than its slurmd (the steps' processes)."""
        out = sh("ip", "netns", "pids", self.netns(node), check=False).stdout.decode()
        keep = {self.slurmd[node].pid} if node in self.slurmd else set()
        return [int(p) for p in out.split() if int(p) not in keep and _cmdline(int(p))
                and "slurmd" not in _cmdline(int(p)).split(" ")[0]]

    def node_cmdlines(self, node: str) -> list[str]:
        return [_cmdline(p) for p in self.node_pids(node)]

    def block_all_nodes(self, seconds: int = 300) -> str:
        """Submit a job holding every node of the default partition exclusively; its id once it
        runs (a job submitted after it pends with reason Resources)."""
        from tests.support.waits import wait_for

        job = self.run("sbatch", "--parsable", f"-N{self.count}", "--exclusive", "-o", "/dev/null", "--wrap",
                       f"sleep {seconds}").stdout.strip()
        wait_for(lambda: self.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", 20,
                 what="the blocking job to run")
        return job

    def cancel_all(self) -> None:
        """Cancel every job of this lab (between tests; by job id)."""
        for job in self.jobs():
            self.run("scancel", job, check=False)
        end = time.monotonic() + 30
        while self.jobs() and time.monotonic() < end:
            time.sleep(0.2)

    def out_of_service(self) -> dict[str, str]:
        """Nodes Slurm took out of service (DRAIN, DOWN, FAIL in their state), each with Slurm's
        own reason (``scontrol show node``'s Reason=, e.g. "Kill task failed": a step's processes
        outlived UnkillableStepTimeout)."""
        out = self.run("scontrol", "show", "node", "-o", check=False).stdout
        found = {}
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in re.findall(r"(\w+=(?:\S+(?: (?!\w+=)\S+)*))", line))
            state = fields.get("State", "")
            if any(word in state for word in ("DRAIN", "DOWN", "FAIL")):
                found[fields.get("NodeName", "?")] = f"{state}: {fields.get('Reason', 'no reason given')}"
        return found

    def resume(self, nodes: "list[str]") -> None:
        """Put nodes Slurm took out of service back (between tests, once their reason is said)."""
        for node in nodes:
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def stop(self) -> None:
        for job in self.jobs() if self.slurmctld is not None and self.slurmctld.poll() is None else []:
            self.run("scancel", job, check=False)
        for proc in list(self.slurmd.values()) + [self.slurmctld, self.munged]:
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.slurmd.clear()
        self.slurmctld = self.munged = None
        self.net.stop()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
