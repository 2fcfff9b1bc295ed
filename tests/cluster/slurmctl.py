"""A real Slurm for tests, from Debian's packages: munged as the munge user, slurmctld -D and
slurmd -D on a minimal private config (its own ports, spool and munge socket); stopped by its
PIDs afterwards. One node, or several: one slurmd per node on this host, each with its own
port, spool, pid and log (Debian's slurmd runs several on one host)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time

from runner.ports import free_port

SBIN = ("/usr/sbin", "/usr/bin")


def find(name: str) -> str | None:
    for d in SBIN:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def available() -> str:
    """'' when a test cluster can be started here, else why not."""
    if os.geteuid() != 0:
        return "needs root (slurmd and munged)"
    missing = [n for n in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel") if not find(n)]
    if missing:
        return "not installed: " + ", ".join(missing) + " (apt-get install slurm-wlm munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user"
    return ""


# A requeued task waits out its old credential (cred_expire, 120 s by default) and the next
# scheduling pass (sched_interval, 60 s): a test cluster requeues in seconds instead.
CONF = """\
ClusterName=hsxtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
{slurmd}SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock},cred_expire=5
StateSaveLocation={d}/state
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldLogFile={d}/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
KillWait=10
MinJobAge=600
{nodes}PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""
ONE = "SlurmdPort={port}\nSlurmdSpoolDir={d}/spool\nSlurmdPidFile={d}/slurmd.pid\nSlurmdLogFile={d}/slurmd.log\n"
MANY = "SlurmdSpoolDir={d}/spool/%n\nSlurmdPidFile={d}/slurmd-%n.pid\nSlurmdLogFile={d}/slurmd-%n.log\n"


def node_names(nodes: int) -> list[str]:
    """The nodes in slurm.conf's order. Slurm lists a job's nodes sorted by name, so the first,
    its master address, is localhost, which resolves everywhere; the others need not resolve
    (Slurm reaches each by NodeAddr). localhost goes last in the file: while the only node so
    far is named localhost, Slurm takes any name for it and calls the next a duplicate."""
    return [f"node{i}" for i in range(2, nodes + 1)] + ["localhost"]


class Cluster:
    def __init__(self, workdir: str, nodes: int = 1):
        self.dir = workdir
        self.names = node_names(nodes)
        self.procs: list[subprocess.Popen] = []
        self.conf = os.path.join(workdir, "slurm.conf")
        self.env = {"SLURM_CONF": self.conf}

    def start(self, timeout: float = 30.0) -> None:
        d = self.dir
        munge = pwd.getpwnam("munge")
        mdir = os.path.join(d, "munge")
        run = os.path.join(d, "munge-run")  # the socket's folder: others need x on it
        for sub in ("state", "spool", "munge", "munge-run"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chmod(d, 0o755)
        key = os.path.join(mdir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(mdir, 0o700)
        os.chmod(key, 0o400)
        os.chmod(run, 0o755)
        for p in (mdir, key, run):
            os.chown(p, munge.pw_uid, munge.pw_gid)
        sock = os.path.join(run, "munge.socket")
        self._spawn(
            ["runuser", "-u", "munge", "--", find("munged"), "-F", "--key-file", key, "--socket", sock,
             "--pid-file", os.path.join(mdir, "munged.pid"), "--log-file", os.path.join(mdir, "munged.log"),
             "--seed-file", os.path.join(mdir, "munged.seed")],
        )  # fmt: skip
        self._wait(lambda: os.path.exists(sock), timeout, "munged's socket")
        one = len(self.names) == 1
        slurmd = (ONE if one else MANY).format(port=free_port(), d=d)
        nodes = "".join(f"NodeName={n} NodeAddr=127.0.0.1{'' if one else f' Port={free_port()}'} CPUs=16 "
                        "State=UNKNOWN\n" for n in self.names)  # fmt: skip
        with open(self.conf, "w") as f:
            f.write(CONF.format(host=socket.gethostname().split(".")[0], ctld_port=free_port(), slurmd=slurmd,
                                sock=sock, d=d, nodes=nodes, names=",".join(self.names)))  # fmt: skip
        env = {**os.environ, **self.env}
        self._spawn([find("slurmctld"), "-D", "-i", "-f", self.conf], env)
        for n in self.names:
            self._spawn([find("slurmd"), "-D", "-N", n, "-f", self.conf], env, f"slurmd-{n}")
        self._wait(self._node_idle, timeout, "the nodes to come up idle")

    def _spawn(self, argv: list[str], env: dict | None = None, name: str = "") -> None:
        name = name or os.path.basename(argv[0] if argv[0] != "runuser" else "munged")
        log = open(os.path.join(self.dir, name + ".out"), "ab")  # noqa: SIM115
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env or os.environ))

    def _node_idle(self) -> bool:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; see {self.dir}")
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                           env={**os.environ, **self.env})  # fmt: skip
        return r.returncode == 0 and r.stdout.strip() == "idle"

    @staticmethod
    def _wait(pred, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
