"""A lab of SSH hosts on this machine: network namespaces joined by a bridge, each with its own
address (10.231.0.0/24), its own sshd (Debian openssh-server, key-only, own host key), its own
UTS namespace (so ``hostname`` differs) and its own mount namespace, where root's ``~/.bashrc``
is a fresh Debian host's (see FRESH_BASHRC). Needs root. Used by the ssh integration tests and
bench/ssh_fanout.py.

Layout: the bridge lives in its own namespace ``<prefix>sw`` (so the machine's firewall, e.g.
Docker's FORWARD policy, never sees host-to-host traffic); this machine reaches the lab through
a veth with 10.231.0.1; host i has ``<prefix>h<i>`` with 10.231.0.(10+i).

With ``private`` set (a directory path), each host's sshd runs in its own mount namespace with
its own tmpfs (``private_size``) mounted at that path: a file written there through one host is
invisible to the others and to this machine, like VMs with their own disks (the state dir tests).
Every other path stays shared.

Everything is torn down by ``stop()`` with timeouts: sshd and every process left in the lab's
namespaces (found with ``ip netns pids``, never by name), the namespaces, the veths.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.support.processes import alive

# Two sessions on one machine (e.g. two developers' test runs) each set their own
# TFCLUSTER_LAB_SUBNET / TFCLUSTER_LAB_PREFIX, or their labs would tear each other down.
SUBNET = os.environ.get("TFCLUSTER_LAB_SUBNET", "10.231.0")
GATEWAY = f"{SUBNET}.1"
SSHD = "/usr/sbin/sshd"


# sshd runs every command through the user's login shell, and bash then reads ~/.bashrc even
# when not interactive. This machine's root .bashrc is Debian's plus `pyenv init` and
# `pyenv virtualenv-init` (about 60 processes): 135 ms of CPU and 290 ms per session, paid by
# every ssh session to a lab host (pdsh's and tfcluster's alike), where a fresh Debian host's
# root .bashrc (base-files' dot.bashrc, all comments) costs 1.4 ms. Each host's sshd therefore
# sees Debian's stock file at ~/.bashrc (a bind mount in its own mount namespace).
FRESH_BASHRC = Path("/usr/share/base-files/dot.bashrc")


def _fresh_bashrc_mount() -> str:
    """The shell snippet that bind-mounts a fresh host's root .bashrc over this machine's."""
    home_rc = Path.home() / ".bashrc"
    if not (FRESH_BASHRC.is_file() and home_rc.is_file()):
        return ""
    return f"mount --bind {FRESH_BASHRC} {home_rc} && "


def sh(*argv: str, timeout: float = 20.0, check: bool = True, input: Optional[bytes] = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    return proc


@dataclass
class LabHost:
    name: str
    netns: str
    address: str
    dir: Path
    sshd: Optional[subprocess.Popen] = None
    host_pubkey: str = ""

    def exec(self, *argv: str, timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command inside this host's network namespace (not over SSH)."""
        return sh("ip", "netns", "exec", self.netns, *argv, timeout=timeout, check=check)

    def exec_private(self, *argv: str, timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command in this host's mount and network namespaces (sees its private dir)."""
        assert self.sshd is not None and self.sshd.poll() is None, f"{self.name}: sshd is not running"
        return sh("nsenter", "-t", str(self.sshd.pid), "-m", "-n", "--", *argv, timeout=timeout, check=check)


@dataclass
class Lab:
    root: Path
    count: int = 3
    prefix: str = os.environ.get("TFCLUSTER_LAB_PREFIX", "tfcs")
    hosts: list[LabHost] = field(default_factory=list)
    client_key: Path = Path()
    known_hosts: Path = Path()
    private: Optional[Path] = None  # per-host private tmpfs mounted here (see the module doc)
    private_size: str = "64m"
    # Another lab on the same machine (e.g. the slurm lab beside the ssh lab) uses its own
    # subnet and prefix; ``sshd=False`` builds only the network (no keys, no sshd).
    subnet: str = SUBNET
    sshd: bool = True

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    @property
    def switch(self) -> str:
        return f"{self.prefix}sw"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "Lab":
        self.root.mkdir(parents=True, exist_ok=True)
        self._cleanup_stale()
        self._raise_neighbour_limits()
        if self.sshd:
            os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation dir
            self.client_key = self.root / "client_ed25519"
            if not self.client_key.exists():
                sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfcluster-test", "-f", str(self.client_key))
            (self.root / "authorized_keys").write_text((self.root / "client_ed25519.pub").read_text())
        sh("ip", "netns", "add", self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        sh("ip", "-n", self.switch, "link", "set", "lo", "up")
        # This machine's leg into the lab.
        sh("ip", "link", "add", f"{self.prefix}gw", "type", "veth", "peer", "name", "gw", "netns", self.switch)
        sh("ip", "-n", self.switch, "link", "set", "gw", "master", "br0", "up")
        sh("ip", "addr", "add", f"{self.gateway}/24", "dev", f"{self.prefix}gw")
        sh("ip", "link", "set", f"{self.prefix}gw", "up")
        for i in range(1, self.count + 1):
            self._add_host(i)
        if not self.sshd:
            return self
        lines = []
        for h in self.hosts:
            lines.append(f"{h.address} {h.host_pubkey}")
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text("\n".join(lines) + "\n")
        for h in self.hosts:
            self.start_sshd(h)
        for h in self.hosts:
            self.wait_port(h.address, 22, timeout=10)
        return self

    def _add_host(self, i: int) -> None:
        name = f"h{i}"
        netns = f"{self.prefix}h{i}"
        h = LabHost(name=name, netns=netns, address=f"{self.subnet}.{10 + i}", dir=self.root / name)
        h.dir.mkdir(parents=True, exist_ok=True)
        sh("ip", "netns", "add", netns)
        sh("ip", "-n", self.switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", netns)
        sh("ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
        sh("ip", "-n", netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
        sh("ip", "-n", netns, "link", "set", "eth0", "up")
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        self.hosts.append(h)
        if not self.sshd:
            return
        key = h.dir / "ssh_host_ed25519_key"
        if not key.exists():
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        h.host_pubkey = " ".join((h.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        (h.dir / "sshd_config").write_text(
            "\n".join(
                [
                    f"ListenAddress {h.address}",
                    "Port 22",
                    f"HostKey {key}",
                    f"PidFile {h.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    "AllowTcpForwarding yes",
                    "MaxSessions 64",
                    "MaxStartups 200:30:400",
                    "PrintMotd no",
                    "LogLevel VERBOSE",  # logs each session's command: see remote_commands()
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            )
        )

    def start_sshd(self, h: LabHost) -> None:
        log = open(h.dir / "sshd.log", "ab")
        # Own UTS namespace: `hostname` inside is the lab host's name. `ip netns exec` and
        # `unshare` exec (no fork), so h.sshd.pid is sshd, in the host's namespaces.
        # Own mount namespace too: the login shell's rc file is a fresh host's (see FRESH_BASHRC).
        unshare, mount = ["unshare", "--uts", "--mount", "--propagation", "private"], _fresh_bashrc_mount()
        if self.private is not None:
            self.private.mkdir(parents=True, exist_ok=True)
            mount += f'mount -t tmpfs -o size={self.private_size},mode=0755 tfcs-{h.name} "$2" && '
        h.sshd = subprocess.Popen(
            ["ip", "netns", "exec", h.netns, *unshare, "--", "sh", "-c",
             f'hostname {h.name} && {mount}exec {SSHD} -D -e -f "$1"', "sh", str(h.dir / "sshd_config"),
             str(self.private or "")],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )
        log.close()

    def stop_sshd(self, h: LabHost) -> None:
        """Stop the listening sshd (sessions it forked keep running)."""
        if h.sshd is not None and h.sshd.poll() is None:
            h.sshd.terminate()
            try:
                h.sshd.wait(5)
            except subprocess.TimeoutExpired:
                h.sshd.kill()
                h.sshd.wait(5)
        h.sshd = None

    def preempt(self, name: str, notice: float = 10.0) -> None:
        """A Spot VM's preemption: SIGTERM to every process of the host (ACPI soft off), SIGKILL to
        what is left once they are all gone or after ``notice`` seconds, then its link down. With
        ``private``, its disk goes with its sshd's mount namespace."""
        h = self.host(name)
        pids = self._netns_pids(h.netns)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + notice
        while time.monotonic() < end and any(alive(p) for p in pids):
            time.sleep(0.1)  # the notice: the host's processes end by themselves, or are killed at its end
        for pid in self._netns_pids(h.netns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        h.exec("ip", "link", "set", "eth0", "down")

    def shutdown(self, name: str, notice: float = 3.0, reboot: bool = False) -> float:
        """A VM shutting down as an OS does it (a Spot preemption's ACPI soft off, a reboot):
        SIGTERM to every process of the host but its listening sshd, which, as until systemd
        stops ssh.service, still accepts new connections; ``notice`` seconds later SIGKILL to all
        (the listener too) and the link down. ``reboot``: the link up and sshd started again at
        once (a fresh private disk), as a VM whose OS restarts quickly. Returns when the host
        went down (time.time())."""
        h = self.host(name)
        listener = h.sshd.pid if h.sshd is not None and h.sshd.poll() is None else None
        for pid in self._netns_pids(h.netns):
            if pid != listener:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(notice)  # the fault's own schedule: the notice the OS gives its processes
        for pid in self._netns_pids(h.netns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if h.sshd is not None:
            h.sshd.wait(5)
            h.sshd = None
        h.exec("ip", "link", "set", "eth0", "down")
        went = time.time()
        if reboot:
            self.bring_back(name)
        return went

    def drop_sessions(self, name: str, every: float, duration: float, stop=None) -> int:
        """A host whose sessions keep dropping (a flaky NIC, a conntrack table that overflows):
        every ``every`` s for ``duration`` s (or until ``stop``, a threading.Event, is set), SIGKILL
        to each of its sshd's session processes (every established SSH connection ends; the
        listener stays and accepts new ones). Returns how many times sessions were dropped."""
        h = self.host(name)
        end, times = time.monotonic() + duration, 0
        while time.monotonic() < end:
            if stop is not None and stop.wait(every):  # the fault's own schedule
                break
            if stop is None:
                time.sleep(every)
            listener = h.sshd.pid if h.sshd is not None else None
            sessions = [p for p in self._netns_pids(h.netns) if p != listener and _comm(p).startswith("sshd")]
            for pid in sessions:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            times += bool(sessions)
        return times

    def pause(self, name: str) -> list[int]:
        """A VM paused (a live migration that hangs, a hypervisor that stalls): every process of
        the host stopped (SIGSTOP), its link up; nothing it runs notices. Returns the pids, for
        :meth:`resume`."""
        pids = self._netns_pids(self.host(name).netns)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return pids

    def resume(self, pids: list[int]) -> None:
        """The paused VM runs again where it stopped (SIGCONT to what :meth:`pause` stopped)."""
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def bring_back(self, name: str) -> None:
        """The VM starts again: its link up, sshd started (a fresh private disk), port 22 open."""
        h = self.host(name)
        h.exec("ip", "link", "set", "eth0", "up")
        if h.sshd is None or h.sshd.poll() is not None:
            self.start_sshd(h)
        self.wait_port(h.address, 22, timeout=20)

    def flap(self, name: str, cycles: int, up: float, down: float) -> float:
        """A host that flaps: back (link up, sshd), then ``cycles`` times down ``down`` s and up
        ``up`` s (the link only), ending up. Returns when its link came up for good (time.time())."""
        self.bring_back(name)
        h = self.host(name)
        for _ in range(cycles):
            time.sleep(up)  # the fault's own schedule, not a wait for anything
            h.exec("ip", "link", "set", "eth0", "down")
            time.sleep(down)
            h.exec("ip", "link", "set", "eth0", "up")
        return time.time()

    def remote_commands(self, h: LabHost) -> int:
        """How many commands (each one remote login shell) sshd has run on ``h`` so far."""
        try:
            text = (h.dir / "sshd.log").read_text(errors="replace")
        except OSError:
            return 0
        return text.count("Starting session: command ")

    def restart_sshd(self, h: LabHost) -> None:
        self.stop_sshd(h)
        self.start_sshd(h)
        self.wait_port(h.address, 22, timeout=10)

    def stop(self) -> None:
        for h in self.hosts:
            try:
                self.stop_sshd(h)
            except Exception:  # noqa: BLE001
                pass
        for netns in [h.netns for h in self.hosts] + [self.switch]:
            self._kill_netns_procs(netns)
            sh("ip", "netns", "del", netns, check=False)
        sh("ip", "link", "del", f"{self.prefix}gw", check=False)
        self.hosts.clear()
        for path, value in self._neigh_saved.items():
            try:
                Path(path).write_text(value)
            except OSError:
                pass
        self._neigh_saved = {}

    _neigh_saved: dict = field(default_factory=dict)

    def _raise_neighbour_limits(self) -> None:
        """Every host of the lab talks to every other: n*(n+1) ARP entries, and all network
        namespaces share one kernel neighbour table (gc_thresh3 = 1024 by default). At 32 hosts
        it overflows ("neighbor table overflow!" in dmesg) and connections between the hosts
        set up last time out, which looks like a firewall. Raised for the lab's lifetime."""
        need = (self.count + 2) ** 2 * 2
        for name, want in (("gc_thresh1", need // 4), ("gc_thresh2", need // 2), ("gc_thresh3", need)):
            path = f"/proc/sys/net/ipv4/neigh/default/{name}"
            try:
                current = int(Path(path).read_text())
                if current < want:
                    self._neigh_saved[path] = str(current)
                    Path(path).write_text(str(want))
            except (OSError, ValueError):
                pass

    def _kill_netns_procs(self, netns: str) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self._netns_pids(netns)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 3
            while time.monotonic() < end and self._netns_pids(netns):
                time.sleep(0.05)

    @staticmethod
    def _netns_pids(netns: str) -> list[int]:
        proc = sh("ip", "netns", "pids", netns, check=False, timeout=10)
        return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []

    def _cleanup_stale(self) -> None:
        """Remove namespaces/links of a lab with this prefix left by a crashed run."""
        out = sh("ip", "netns", "list", check=False).stdout.decode()
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(self.prefix) and (name == self.switch or name[len(self.prefix):].startswith("h")):
                self._kill_netns_procs(name)
                sh("ip", "netns", "del", name, check=False)
        sh("ip", "link", "del", f"{self.prefix}gw", check=False)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def wait_port(address: str, port: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((address, port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > end:
                    raise RuntimeError(f"{address}:{port} did not open within {timeout:g} s")
                time.sleep(0.05)

    def host(self, name: str) -> LabHost:
        return next(h for h in self.hosts if h.name == name)

    def hosts_yaml(self, names: Optional[list[str]] = None, user: str = "root") -> list[dict]:
        return [
            {"name": h.name, "ssh": f"{user}@{h.address}", "key": str(self.client_key)}
            for h in self.hosts
            if names is None or h.name in names
        ]

    def pdsh_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PDSH_SSH_ARGS"] = (
            f"-i {self.client_key} -o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes "
            "-o BatchMode=yes -o IdentitiesOnly=yes -l%u %h"
        )
        env["PDSH_RCMD_TYPE"] = "ssh"
        return env


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def have_prereqs() -> Optional[str]:
    """None if the lab can run here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, sshd)"
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"'{tool}' not found; install Debian package {pkg} (tests/setup/ssh.sh)"
    if not os.path.exists(SSHD):
        return f"{SSHD} not found; install Debian package openssh-server (tests/setup/ssh.sh)"
    return None
