"""SSHTransport against two real OpenSSH daemons: a jump host and a target reachable only
through it (tests/sshd.py). Faults are real: daemons killed, paused, re-keyed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from remote.client import GpuBox
from remote.connect import open_box
from remote.errors import AuthFailed, CommandTimeout, HostKeyMismatch, Unreachable
from remote.ssh import MAX_COMMAND_BYTES, SSHTransport
from runner.contract import timing
from runner.contract.config import from_dict
from runner.contract.status import Phase, StatusRecord, write_record
from tests import sshd
from tests.conftest import write_config
from tests.runner.helpers import wait_for

RUNNER = os.path.join(os.path.dirname(sys.executable), "hsx-runner")


def make(pair, records=None, **kw) -> SSHTransport:
    args = dict(
        host=pair.target.addr,
        port=pair.target.port,
        user=pair.user,
        identity_file=pair.client_key,
        known_hosts=pair.known_hosts,
        jump=pair.jump_spec,
        # the product's connect bound: a shorter one made a busy machine's slow banner a retry, and
        # the tests that count retries failed (a test about a slow or hung hop sets its own)
        on_retry=records.append if records is not None else None,
    )
    args.update(kw)
    return SSHTransport(**args)


def log_count(hop, text: str) -> int:
    with open(hop.log) as f:
        return f.read().count(text)


def echo_argv_script(tmp_path) -> str:
    path = tmp_path / "echo_argv.py"
    path.write_text(
        f'#!{sys.executable}\nimport json, sys\nprint(json.dumps({{"argv": sys.argv[1:], "lines": []}}))\n'
    )
    path.chmod(0o755)
    return str(path)


def test_the_targets_shell_runs_no_rc_file(shared_pair, closing):
    """The tests' sessions start bash at shell level 2, where it sources no ~/.bashrc: a session
    killed mid-rc must not leave the machine's dotfiles half-run (tests/sshd.py says why)."""
    t = make(shared_pair)
    closing.append(t)
    res = t.run(["/usr/bin/env"], 10)
    # bash started at level 2 and exec'd the command a level down; started at 1 (after sourcing
    # ~/.bashrc), the command would see SHLVL=0
    assert res.code == 0 and "\nSHLVL=1\n" in res.stdout, res.stdout


# -- the path ------------------------------------------------------------------------------


def test_runs_through_the_jump_only(shared_pair, closing):
    t = make(shared_pair)
    closing.append(t)
    res = t.run(["/bin/echo", "hello"], 10)
    assert (res.code, res.stdout, res.stderr) == (0, "hello\n", "")
    assert shared_pair.peer_checks()[-1].startswith("allowed: through the jump")

    # The same key, straight to the target: refused, because it did not come through the jump.
    direct = make(shared_pair, jump=None)
    closing.append(direct)
    with pytest.raises(AuthFailed) as e:
        direct.run(["/bin/echo", "hello"], 10)
    assert e.value.hop == "target"
    assert shared_pair.peer_checks()[-1].startswith("refused: not through the jump")


def test_the_box_s_commands_run_on_the_tests_timing_profile(shared_pair, closing):
    """The runners the e2e tests start over SSH wait on the short clocks too (tests/sshd.py)."""
    t = make(shared_pair)
    closing.append(t)
    assert t.run(["/usr/bin/printenv", "HSX_TIMING"], 10).stdout == "fast\n"


def test_jump_forwards_nowhere_else(shared_pair, closing):
    records = []
    t = make(shared_pair, records, host=shared_pair.jump.addr, port=shared_pair.jump.port)
    closing.append(t)
    with pytest.raises(Unreachable) as e:
        t.run(["/bin/true"], 10)
    assert e.value.hop == "target" and "refuses to forward" in str(e.value)
    assert records == []  # a policy on the jump: retrying cannot help


def test_exit_code_and_stderr(shared_pair, closing):
    t = make(shared_pair)
    closing.append(t)
    res = t.run(["/bin/sh", "-c", "echo out; echo oops >&2; exit 7"], 10)
    assert (res.code, res.stdout, res.stderr) == (7, "out\n", "oops\n")
    big = t.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdout.write('x' * 3_000_000); sys.stderr.write('y' * 3_000_000)",
        ],
        20,
    )
    assert (big.code, len(big.stdout), len(big.stderr)) == (0, 3_000_000, 3_000_000)


def test_hostile_arguments_never_reach_a_shell(shared_pair, closing, tmp_path):
    canary = tmp_path / "pwned"
    hostile = [
        f"; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"a\ntouch {canary}\n",
        f"' ; touch {canary}; '",
        f'" && touch {canary} && "',
        f"| touch {canary}",
        f"> {canary}",
        "*",
        "~",
        "$HOME",
        "",
        "-rf",
        "\\",
        "ünïcødé ✓",
        "x" * 50_000,
    ]
    t = make(shared_pair)
    closing.append(t)
    res = t.run([echo_argv_script(tmp_path), *hostile], 20)
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["argv"] == hostile
    # Through the client too: the runner's config path is the hostile part here.
    box = GpuBox(t, echo_argv_script(tmp_path), hostile[1], timeout_s=20)
    assert box.preflight()["argv"] == ["preflight", "--json", "--config", hostile[1]]
    assert not canary.exists()
    # Too long for the remote shell's one argument: refused here, before anything is sent.
    with pytest.raises(ValueError, match="limit"):
        t.run(["/bin/echo", "x" * MAX_COMMAND_BYTES], 10)
    with pytest.raises(ValueError, match="NUL"):
        t.run(["/bin/echo", "a\0b"], 10)


def test_threads_share_one_connection(shared_pair, closing, monkeypatch):
    # The product's probe (2 s, not the fast profile's 1 s): on a starved box a probe answered
    # late is a hop declared gone and a second connection, which is the keepalive's promise,
    # not a thread's own connection. Each such loss is a retry, counted below.
    monkeypatch.setenv(timing.ENV, "production")
    records: list = []
    t = make(shared_pair, records)
    closing.append(t)
    before = log_count(shared_pair.target, "Accepted publickey")
    results: dict[int, list[str]] = {}

    def worker(n: int) -> None:
        results[n] = [t.run(["/bin/echo", f"{n}-{i}"], 20).stdout for i in range(4)]

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert results == {n: [f"{n}-{i}\n" for i in range(4)] for n in range(6)}
    # one connection for the six threads; another only after a loss that a retry said
    logins = log_count(shared_pair.target, "Accepted publickey") - before
    assert 1 <= logins <= 1 + len(records), (logins, [str(r) for r in records])


def test_status_over_the_two_hop_path(shared_pair, tmp_path):
    if not os.path.exists(RUNNER):
        sshd.skip_or_fail(f"{RUNNER} not installed yet (pip install -e .)")
    out = tmp_path / "out"
    out.mkdir()
    rec = StatusRecord(job="fixture", phase=Phase.STOPPED, host="gpu-1", total=37312, done=25581, failed=3)
    rec.disk.path, rec.disk.used, rec.disk.free = str(out), 3_300_000_000_000, 8_500_000_000_000
    rec.reason = "stopped on request"
    write_record(str(out / "status.json"), rec)
    job_cfg = tmp_path / "hsx.toml"
    write_config(job_cfg, job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/d.jsonl", "out": out})
    cfg = from_dict(
        {
            "remote": {
                "transport": "ssh",
                "host": shared_pair.target.addr,
                "port": shared_pair.target.port,
                "user": shared_pair.user,
                "jump": shared_pair.jump_spec,
                "identity_file": shared_pair.client_key,
                "known_hosts": shared_pair.known_hosts,
                "runner": RUNNER,
                "runner_config": str(job_cfg),
                "command_timeout_s": 30.0,
            }
        }
    )
    box = open_box(cfg)
    try:
        got = box.status()
    finally:
        box.close()
    assert isinstance(got, StatusRecord)
    assert (got.job, got.phase, got.total, got.done, got.failed) == (
        "fixture",
        Phase.STOPPED,
        37312,
        25581,
        3,
    )
    assert (got.disk.used, got.disk.free, got.reason) == (
        3_300_000_000_000,
        8_500_000_000_000,
        "stopped on request",
    )


# -- faults --------------------------------------------------------------------------------


def test_jump_killed_then_back(pair, closing):
    records = []
    t = make(pair, records)
    closing.append(t)
    assert t.run(["/bin/echo", "up"], 10).stdout == "up\n"

    pair.kill(pair.jump)
    start = time.monotonic()
    with pytest.raises(Unreachable) as e:
        t.run(["/bin/echo", "again"], 10)
    assert time.monotonic() - start < 10
    assert e.value.hop == "jump" and str(e.value).startswith("unreachable (jump)")
    assert [r.attempt for r in records] == [1, 2, 3, 4]
    assert all(r.hop == "jump" and r.kind == "Unreachable" for r in records)
    assert "retry 2/5" in str(records[0])

    pair.start(pair.jump)
    assert t.run(["/bin/echo", "back"], 10).stdout == "back\n"  # same object: reconnected by itself
    assert log_count(pair.target, "Accepted publickey") == 2


def test_target_killed_then_back(pair, closing):
    t = make(pair)
    closing.append(t)
    assert t.run(["/bin/true"], 10).code == 0
    pair.kill(pair.target)
    with pytest.raises(Unreachable) as e:
        t.run(["/bin/true"], 10)
    assert e.value.hop == "target" and "cannot connect" in str(e.value)
    pair.start(pair.target)
    assert t.run(["/bin/echo", "back"], 10).stdout == "back\n"


def test_jump_that_hangs_is_unreachable(pair, closing):
    """A hop that stops answering without closing anything (host frozen, link cut)."""
    records = []
    t = make(pair, records, connect_timeout_s=1.0, attempts=2)
    closing.append(t)
    assert t.run(["/bin/true"], 10).code == 0
    pair.pause(pair.jump)
    try:
        start = time.monotonic()
        with pytest.raises(Unreachable) as e:
            t.run(["/bin/true"], 10)
        assert e.value.hop == "jump"
        assert time.monotonic() - start < 8
        assert len(records) == 1
    finally:
        pair.pause(pair.jump, False)
    assert t.run(["/bin/echo", "back"], 10).stdout == "back\n"


@pytest.mark.parametrize("hop_name", ["jump", "target"])
def test_changed_host_key_is_refused(pair, closing, hop_name):
    hop = getattr(pair, hop_name)
    records = []
    t = make(pair, records)
    closing.append(t)
    with open(pair.known_hosts) as f:
        pinned = f.read()
    new_fp = pair.new_host_key(hop)
    with pytest.raises(HostKeyMismatch) as e:
        t.run(["/bin/true"], 10)
    msg = str(e.value)
    assert e.value.hop == hop_name and e.value.fingerprint == new_fp
    assert new_fp in msg and "CHANGED" in msg and "ssh-keygen -R" in msg
    assert hop.known_hosts_line() in msg  # the exact line that would trust it
    assert records == []  # never retried
    with open(pair.known_hosts) as f:
        assert f.read() == pinned  # never auto-added


def test_unknown_host_key_is_refused_until_trusted(pair, closing):
    with open(pair.known_hosts, "w") as f:
        f.write(pair.target.known_hosts_line() + "\n")  # the jump is not known
    t = make(pair)
    closing.append(t)
    with pytest.raises(HostKeyMismatch) as e:
        t.run(["/bin/true"], 10)
    assert e.value.hop == "jump" and e.value.fingerprint == pair.jump.fingerprint()
    assert "not in" in str(e.value)
    with open(pair.known_hosts, "a") as f:  # do what the message says
        f.write(pair.jump.known_hosts_line() + "\n")
    assert t.run(["/bin/echo", "ok"], 10).stdout == "ok\n"


def test_wrong_key_is_an_auth_error_not_retried(pair, closing, tmp_path):
    other = str(tmp_path / "other_key")
    sshd.keygen(other)
    records = []
    t = make(pair, records, identity_file=other)
    closing.append(t)
    before = log_count(pair.jump, "Connection from")
    with pytest.raises(AuthFailed) as e:
        t.run(["/bin/true"], 10)
    assert e.value.hop == "jump" and "refused every key" in str(e.value)
    assert records == []
    assert log_count(pair.jump, "Connection from") == before + 1


def test_a_target_slow_to_answer_the_key_is_unreachable_not_a_refused_key(pair, closing):
    """A busy box that answers the key past the connect bound is a transient unreachable hop,
    retried, never "refused every key" (found beside the busy suite: an operator told their key
    was refused, and no retry, when the target was only slow)."""
    with open(pair.peer_log + ".slow", "w") as f:
        f.write("4")  # the target's key check answers after 4 s; the bound is 1 s
    records = []
    t = make(pair, records, connect_timeout_s=1.0, attempts=1)
    closing.append(t)
    with pytest.raises(Unreachable) as e:
        t.run(["/bin/true"], 10)
    assert e.value.hop == "target" and e.value.transient and "refused" not in str(e.value)
    os.unlink(pair.peer_log + ".slow")
    assert make(pair).run(["/bin/echo", "ok"], 10).stdout == "ok\n"


def test_hanging_command_times_out_and_is_killed(shared_pair, closing):
    records = []
    t = make(shared_pair, records)
    closing.append(t)
    accepted = log_count(shared_pair.target, "Accepted publickey")
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        t.run(["/bin/sleep", "31.25"], 1.0)
    assert time.monotonic() - start < 1.0 + 3
    assert records == []
    assert t.run(["/bin/echo", "still here"], 10).stdout == "still here\n"
    assert log_count(shared_pair.target, "Accepted publickey") == accepted + 1  # same connection

    wait_for(lambda: not sshd.running(["/bin/sleep", "31.25"]), 8, 0.2, "the remote `timeout` to end it")


def test_keys_from_the_agent(shared_pair, closing, tmp_path, monkeypatch):
    if not shutil.which("ssh-agent"):
        sshd.skip_or_fail("ssh-agent not installed (openssh-client)")
    sock = str(tmp_path / "agent.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.02)
        env = dict(os.environ, SSH_AUTH_SOCK=sock)
        subprocess.run(["ssh-add", "-q", shared_pair.client_key], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        t = make(shared_pair, identity_file="")
        closing.append(t)
        assert t.run(["/bin/echo", "agent"], 10).stdout == "agent\n"
    finally:
        agent.kill()
        agent.wait()


def test_no_key_at_all(shared_pair, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    t = make(shared_pair, identity_file="")
    with pytest.raises(AuthFailed, match="no identity_file"):
        t.run(["/bin/true"], 10)
    assert not t.connected()


def test_refused_port_is_unreachable_and_retried(closing, tmp_path):
    key = str(tmp_path / "key")
    sshd.keygen(key)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    records = []
    t = SSHTransport("127.0.0.1", port, identity_file=key, on_retry=records.append, attempts=3)
    closing.append(t)
    with pytest.raises(Unreachable) as e:
        t.run(["/bin/true"], 5)
    assert e.value.hop == "target" and "refused" in str(e.value).lower()
    assert [r.attempt for r in records] == [1, 2]


def test_bad_identity_file_is_clear(tmp_path):
    t = SSHTransport("127.0.0.1", 22, identity_file=str(tmp_path / "missing"))
    with pytest.raises(AuthFailed, match="not found"):
        t.run(["/bin/true"], 5)
    (tmp_path / "junk").write_text("not a key\n")
    t = SSHTransport("127.0.0.1", 22, identity_file=str(tmp_path / "junk"))
    with pytest.raises(AuthFailed, match="cannot load"):
        t.run(["/bin/true"], 5)


# -- known_hosts as OpenSSH writes it ---------------------------------------------------------


def _known_hosts(tmp_path, *lines: str) -> str:
    path = tmp_path / "known_hosts"
    path.write_text("".join(x + "\n" for x in lines))
    return str(path)


def _other_key(tmp_path, name: str) -> str:
    return sshd.keygen(str(tmp_path / name), name).split()[1]


def test_cert_authority_lines_and_comments_are_skipped(shared_pair, closing, tmp_path):
    ca = _other_key(tmp_path, "ca")
    kh = _known_hosts(
        tmp_path,
        "# hosts of the lab",
        f"@cert-authority *.lab.example ssh-ed25519 {ca} lab CA",
        "",
        shared_pair.jump.known_hosts_line() + " the jump",
        f"@cert-authority {shared_pair.target.known_hosts_name} ssh-ed25519 {ca}",
        "\t" + shared_pair.target.known_hosts_line(),
    )
    t = make(shared_pair, known_hosts=kh)
    closing.append(t)
    assert t.run(["/bin/echo", "ok"], 10).stdout == "ok\n"


@pytest.mark.parametrize("hop_name", ["jump", "target"])
def test_a_revoked_host_key_is_refused_even_when_pinned(shared_pair, closing, tmp_path, hop_name):
    hop = getattr(shared_pair, hop_name)
    kh = _known_hosts(
        tmp_path,
        shared_pair.jump.known_hosts_line(),
        shared_pair.target.known_hosts_line(),
        "@revoked * " + " ".join(hop.known_hosts_line().split()[1:]),
    )
    records = []
    t = make(shared_pair, records, known_hosts=kh)
    closing.append(t)
    with pytest.raises(HostKeyMismatch) as e:
        t.run(["/bin/true"], 10)
    assert e.value.hop == hop_name and e.value.fingerprint == hop.fingerprint()
    assert "REVOKED" in str(e.value) and f"{kh} line 3" in str(e.value)
    assert records == []  # never retried


@pytest.mark.parametrize(
    "bad,why",
    [
        ("[10.0.0.9]:22 ssh-ed25519", "expected HOSTS KEYTYPE KEY"),
        ("[10.0.0.9]:22 ssh-ed25519 not*base64!", "key is not base64"),
        ("[10.0.0.9]:22 ssh-rsa Z2FyYmFnZQ==", "key does not load"),
        ("@trusted [10.0.0.9]:22 ssh-ed25519 AAAA", "unknown marker '@trusted'"),
        ("@revoked", "expected HOSTS KEYTYPE KEY"),
        ("|1|bm90IGEgc2FsdA|!! ssh-ed25519 AAAA", "hashed host name is not base64"),
    ],
)
def test_an_unparsable_line_is_a_clear_error_naming_the_file_and_line(shared_pair, tmp_path, bad, why):
    kh = _known_hosts(
        tmp_path, shared_pair.jump.known_hosts_line(), bad, shared_pair.target.known_hosts_line()
    )
    t = make(shared_pair, known_hosts=kh)
    try:
        with pytest.raises(HostKeyMismatch) as e:
            t.run(["/bin/true"], 10)
    finally:
        t.close()
    assert f"{kh} line 2" in str(e.value) and why in str(e.value)


def test_a_key_type_this_client_cannot_use_is_not_an_error(shared_pair, closing, tmp_path):
    kh = _known_hosts(
        tmp_path,
        shared_pair.jump.known_hosts_line(),
        f"{shared_pair.target.known_hosts_name} ssh-future-v9 AAAAB3NzaC1mdXR1cmUtdjk=",
        shared_pair.target.known_hosts_line(),
    )
    t = make(shared_pair, known_hosts=kh)
    closing.append(t)
    assert t.run(["/bin/echo", "ok"], 10).stdout == "ok\n"


def test_hashed_names_from_ssh_keygen_still_pin(shared_pair, closing, tmp_path):
    kh = _known_hosts(tmp_path, shared_pair.jump.known_hosts_line(), shared_pair.target.known_hosts_line())
    subprocess.run(["ssh-keygen", "-H", "-f", kh], check=True, capture_output=True)
    with open(kh) as f:
        assert f.read().count("|1|") == 2
    t = make(shared_pair, known_hosts=kh)
    closing.append(t)
    assert t.run(["/bin/echo", "ok"], 10).stdout == "ok\n"
