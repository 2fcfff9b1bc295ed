"""Two real OpenSSH daemons on loopback: a jump host and a target reachable only through it.

Reusable by any test or bench that needs the real two-hop path::

    with two_hop(tmpdir) as pair:
        SSHTransport(pair.target.addr, pair.target.port, pair.user, pair.client_key,
                     pair.known_hosts, jump=pair.jump_spec)

Each daemon has its own host key, config, log and port on its own 127.0.0.x address. The jump
allows only local forwarding, and only to the target. The target has no authorized_keys file:
its AuthorizedKeysCommand (``check-peer`` below) grants the client key only when the TCP
connection it is authenticating is owned by a process of the jump's sshd, so a client that
connects to the target directly is refused even though it holds the right key.

Stdlib only: the target's sshd runs this file as its AuthorizedKeysCommand.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

JUMP_ADDR = "127.0.0.2"
TARGET_ADDR = "127.0.0.3"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
START_TIMEOUT_S = 10.0


REQUIRE_ENV = "HSX_REQUIRE_SSHD"  # CI sets it: a missing sshd fails instead of skipping


def need_sshd() -> None:
    """Skip a test that needs sshd where it cannot run, but fail in CI."""
    why = available()
    if why:
        skip_or_fail(why)


def skip_or_fail(why: str, require_env: str = REQUIRE_ENV) -> None:
    """A missing tool skips the test here, but fails it in CI, which installs every tool (and
    sets ``require_env``)."""
    import pytest

    if os.environ.get(require_env):
        pytest.fail(f"{why} ({require_env} is set)")
    pytest.skip(why)


def available() -> str:
    """Empty when daemons can be started here, else why not (for pytest.skip)."""
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        return "OpenSSH server not installed (apt-get install -y openssh-server)"
    if os.geteuid() != 0 and not os.path.isdir("/run/sshd"):
        return "sshd needs /run/sshd (create it as root)"
    return ""


def keygen(path: str, comment: str = "hsx-test") -> str:
    """A fresh ed25519 key at path (path.pub alongside); returns the public key line."""
    for p in (path, path + ".pub"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    with open(path + ".pub") as f:
        return f.read().strip()


def fingerprint(pub_path: str) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", pub_path], capture_output=True, text=True)
    return out.stdout.split()[1]


def _safe_python() -> str:
    """An interpreter sshd accepts for AuthorizedKeysCommand: root-owned path, nothing group/world
    writable up to /."""
    for cand in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        path, ok = os.path.realpath(cand), True
        while ok and os.path.exists(cand):
            st = os.stat(path)
            ok = st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022
            if path == "/":
                break
            path = os.path.dirname(path)
        if ok and os.path.exists(cand):
            return os.path.realpath(cand)
    raise RuntimeError("no root-owned python for the target's AuthorizedKeysCommand")


def _children(pid: int) -> list[int]:
    """Every descendant of pid (sshd forks one process tree per connection)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


@dataclass
class Hop:
    name: str  # "jump" or "target"
    addr: str
    port: int
    dir: str
    proc: subprocess.Popen | None = None

    @property
    def host_key(self) -> str:
        return os.path.join(self.dir, "host_ed25519")

    @property
    def config(self) -> str:
        return os.path.join(self.dir, "sshd_config")

    @property
    def log(self) -> str:
        return os.path.join(self.dir, "sshd.log")

    @property
    def pidfile(self) -> str:
        return os.path.join(self.dir, "listener.pid")

    @property
    def known_hosts_name(self) -> str:
        return f"[{self.addr}]:{self.port}"

    def fingerprint(self) -> str:
        return fingerprint(self.host_key + ".pub")

    def known_hosts_line(self) -> str:
        with open(self.host_key + ".pub") as f:
            kind, blob = f.read().split()[:2]
        return f"{self.known_hosts_name} {kind} {blob}"


class TwoHop:
    def __init__(self, root: str, user: str | None = None):
        self.root = os.path.abspath(root)
        self.user = user or getpass.getuser()
        from runner.ports import free_port  # here: sshd runs this file as its keys command

        self.jump = Hop("jump", JUMP_ADDR, free_port(JUMP_ADDR), os.path.join(self.root, "jump"))
        self.target = Hop("target", TARGET_ADDR, free_port(TARGET_ADDR), os.path.join(self.root, "target"))
        self.client_key = os.path.join(self.root, "client_ed25519")
        self.authorized_keys = os.path.join(self.root, "authorized_keys")
        self.known_hosts = os.path.join(self.root, "known_hosts")
        self.peer_log = os.path.join(self.target.dir, "peer-check.log")

    @property
    def jump_spec(self) -> str:
        return f"{self.user}@{self.jump.addr}:{self.jump.port}"

    def hops(self) -> tuple[Hop, Hop]:
        return self.jump, self.target

    # -- setup -------------------------------------------------------------------------------

    def setup(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for hop in self.hops():
            os.makedirs(hop.dir, exist_ok=True)
            keygen(hop.host_key, f"hsx-test-{hop.name}-host")
        with open(self.authorized_keys, "w") as f:
            f.write(keygen(self.client_key, "hsx-test-client") + "\n")
        self.write_known_hosts()
        self.write_configs()

    def write_known_hosts(self) -> None:
        with open(self.known_hosts, "w") as f:
            f.write("".join(h.known_hosts_line() + "\n" for h in self.hops()))

    def write_configs(self) -> None:
        common = [
            "HostKey {key}",
            "PidFile none",
            "StrictModes no",  # keys live under a world-writable /tmp
            "UsePAM no",
            "UseDNS no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            "X11Forwarding no",
            "AllowAgentForwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "LogLevel VERBOSE",
        ]
        jump = common + [
            f"ListenAddress {self.jump.addr}:{self.jump.port}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "AllowTcpForwarding local",
            f"PermitOpen {self.target.addr}:{self.target.port}",
            "PermitTTY no",
            "ForceCommand /bin/false",  # a jump host forwards; it runs nothing
        ]
        check = (
            f"AuthorizedKeysCommand {_safe_python()} -S {os.path.abspath(__file__)} check-peer"
            f" {self.target.addr}:{self.target.port} {self.jump.pidfile} {self.authorized_keys} {self.peer_log}"
        )
        target = common + [
            f"ListenAddress {self.target.addr}:{self.target.port}",
            "AuthorizedKeysFile none",
            check,
            f"AuthorizedKeysCommandUser {self.user}",
            "AllowTcpForwarding no",
        ]
        # The box's commands run on the tests' timing profile too (tests/conftest.py sets it here).
        env = [f"HSX_TIMING={os.environ['HSX_TIMING']}"] if os.environ.get("HSX_TIMING") else []
        # The session's bash reads no rc files (it sources ~/.bashrc under sshd only at shell
        # level 1): the machine's dotfiles are not the tests'. A session a test kills mid-rc
        # leaves their state behind: pyenv's rehash lock, left so, stalled every later command
        # on the machine for 60 s and failed 19 SSH tests until it was removed by hand.
        env.append("SHLVL=1")
        target.append("SetEnv " + " ".join(env))  # one line: sshd takes the first SetEnv it reads
        for hop, lines in ((self.jump, jump), (self.target, target)):
            with open(hop.config, "w") as f:
                f.write("\n".join(lines).replace("{key}", hop.host_key) + "\n")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, hop: Hop | None = None) -> None:
        for h in [hop] if hop else self.hops():
            if h.proc and h.proc.poll() is None:
                continue
            h.proc = subprocess.Popen(
                [SSHD, "-D", "-f", h.config, "-E", h.log],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            with open(h.pidfile, "w") as f:
                f.write(f"{h.proc.pid}\n")
            self._wait_ready(h)

    def _wait_ready(self, h: Hop) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if h.proc.poll() is not None:
                raise RuntimeError(f"{h.name} sshd exited {h.proc.returncode}: {self.tail(h)}")
            try:
                with socket.create_connection((h.addr, h.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"{h.name} sshd not ready after {START_TIMEOUT_S}s: {self.tail(h)}")

    def kill(self, hop: Hop) -> None:
        """SIGKILL the listener and every session under it, as when the host dies: the client's
        established connections are cut, not drained."""
        if not hop.proc or hop.proc.poll() is not None:
            return
        tree = [hop.proc.pid] + _children(hop.proc.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        hop.proc.wait(5)

    def pause(self, hop: Hop, paused: bool = True) -> None:
        """SIGSTOP / SIGCONT the whole daemon: a hop that hangs without closing anything."""
        sig = signal.SIGSTOP if paused else signal.SIGCONT
        for pid in [hop.proc.pid] + _children(hop.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def pause_sessions(self, hop: Hop) -> list[int]:
        """SIGSTOP every session under the daemon but not its listener: the connections held
        now hang without closing, while a new connection still gets through. Returns the pids."""
        pids = _children(hop.proc.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def restart(self, hop: Hop) -> None:
        self.kill(hop)
        self.start(hop)

    def new_host_key(self, hop: Hop) -> str:
        """Give the hop a new host key (known_hosts keeps the old one); returns its fingerprint."""
        keygen(hop.host_key, f"hsx-test-{hop.name}-host-new")
        self.restart(hop)
        return hop.fingerprint()

    def stop(self) -> None:
        for h in self.hops():
            if h.proc:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(h.proc.pid, signal.SIGCONT)
                self.kill(h)

    def tail(self, hop: Hop, n: int = 15) -> str:
        try:
            with open(hop.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def peer_checks(self) -> list[str]:
        try:
            with open(self.peer_log) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def ssh_config(self) -> str:
        """An ssh_config for the OpenSSH client (``ssh -F``): ``ssh -F cfg target`` goes through
        the jump; ``-J`` hands only -F to the jump hop, so everything lives here."""
        path = os.path.join(self.root, "ssh_config")
        common = (
            f"  User {self.user}\n  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n  GlobalKnownHostsFile /dev/null\n  ControlMaster no\n  ControlPath none\n"
        )
        with open(path, "w") as f:
            f.write(f"Host hsx-jump\n  HostName {self.jump.addr}\n  Port {self.jump.port}\n{common}")
            f.write(
                f"Host hsx-target\n  HostName {self.target.addr}\n  Port {self.target.port}\n"
                f"  ProxyJump hsx-jump\n{common}"
            )
        return path


@contextlib.contextmanager
def two_hop(root: str) -> Iterator[TwoHop]:
    """Both daemons up for the block; always torn down, even when the block fails."""
    pair = TwoHop(root)
    try:
        pair.setup()
        pair.start()
        yield pair
    finally:
        pair.stop()


# -- the target's AuthorizedKeysCommand --------------------------------------------------------


def _hex_addr(addr: str, port: int) -> str:
    return f"{socket.inet_aton(addr)[::-1].hex().upper()}:{port:04X}"


def _tcp_table() -> list[tuple[str, str, str]]:
    """(local, remote, inode) of every IPv4 TCP socket, addresses in /proc/net/tcp's hex form."""
    with open("/proc/net/tcp") as f:
        return [(c[1], c[2], c[9]) for c in (line.split() for line in f.readlines()[1:])]


def connections_to(addr: str, port: int) -> int:
    """Established TCP connections to addr:port on this machine (a client's, or a jump's forward)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for c in rows if c[2] == _hex_addr(addr, port) and c[3] == "01")


def running(argv: list[str]) -> bool:
    """Whether a process with exactly this argv runs on this machine (a command on the target)."""
    want = b"\0".join(a.encode() for a in argv) + b"\0"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read() == want:
                return True
    return False


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    out.add(link[8:-1])
    return out


def _owners(inode: str) -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and inode in _socket_inodes(int(n))]


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def check_peer(listen: str, jump_pidfile: str, authorized_keys: str, log: str) -> int:
    """Print the authorized keys only if the connection being authenticated comes from the
    jump's sshd. sshd runs this from the process that holds that connection: find its socket
    among our ancestors', then the process at the other end of it."""
    with contextlib.suppress(OSError, ValueError):  # a test's busy box: auth answered this late
        with open(log + ".slow") as f:
            time.sleep(float(f.read()))
    addr, port = listen.rsplit(":", 1)
    here = _hex_addr(addr, int(port))
    table = _tcp_table()
    mine = set().union(*(_socket_inodes(p) for p in _ancestors(os.getppid())))
    peers = [r for loc, r, ino in table if loc == here and ino in mine]
    owners = [p for peer in peers for loc, r, ino in table if loc == peer and r == here for p in _owners(ino)]
    try:
        with open(jump_pidfile) as f:
            jump_pid = int(f.read())
    except (OSError, ValueError):
        jump_pid = -1
    ok = bool(owners) and all(jump_pid in _ancestors(p) for p in owners)
    with open(log, "a") as f:
        verdict = "allowed: through the jump" if ok else "refused: not through the jump"
        f.write(f"{verdict} (peer owners {owners})\n")
    if ok:
        with open(authorized_keys) as f:
            sys.stdout.write(f.read())
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "check-peer":
        sys.exit(check_peer(*sys.argv[2:]))
    sys.exit("usage: sshd.py check-peer ADDR:PORT JUMP_PIDFILE AUTHORIZED_KEYS LOG")
