"""Small helpers for runner tests: run verbs, read JSON, compare outputs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import time

from tests.conftest import RUNNER


def runner_json(verb: str, conf: str, *extra) -> tuple[int, dict]:
    """`hsx-runner VERB --json --config CONF ...` run in this process: the CLI's own main and
    reply, without a new interpreter per call (for verify, ~3 s of torch and transformers
    imports; for status, ~90 ms of CPU per 50 ms poll beside the job under test). The commands
    themselves run as processes in the e2e tests (through SSH and the bot) and tests/test_pipes.py."""
    from runner import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([verb, "--json", "--config", conf, *extra])
    assert out.getvalue(), f"hsx-runner {verb} {extra} -> {code}, no reply: {err.getvalue()}"
    return code, json.loads(out.getvalue())


def status(conf: str) -> dict:
    code, rec = runner_json("status", conf)
    assert code == 0, rec
    return rec


def train_status(conf) -> dict:
    """`train status` asked in this process: a process per poll took a third of a core beside the
    trainer under test (the verbs that act still run as processes)."""
    code, st = runner_json("train", str(conf), "status")
    assert code == 0, st
    return st


def verify(conf: str, *extra) -> tuple[int, dict]:
    return runner_json("verify", conf, *extra)


def out_dir(conf: str) -> str:
    return os.path.join(os.path.dirname(conf), "out")


def start_run(conf: str, **env) -> subprocess.Popen:
    """The runner in the foreground, as a real child we can kill."""
    return subprocess.Popen(
        [RUNNER, "run", "--config", conf], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, **env},
    )  # fmt: skip


class TimedOut(AssertionError):
    pass


def wait_for(pred, timeout=60.0, every=0.05, what="condition"):
    """Call pred() until it returns something true, and return that. pred may assert to fail at
    once (a run that failed will not come good); a timeout says what was awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimedOut(f"timed out waiting for {what}")


def until(read, ok, timeout=60.0, every=0.05, what="condition"):
    """read() until ok(value), and return that value (a status polled until it says done); ok may
    assert to fail at once. The timeout's error shows the last value read."""
    last = []

    def pred():
        last[:] = [read()]
        return ok(last[0])

    try:
        wait_for(pred, timeout, every, what)
    except TimedOut as e:
        raise TimedOut(f"{e}; last read: {last[0] if last else None!r}"[:6000]) from None
    return last[0]


def done_count(conf: str) -> int:
    return recorded(out_dir(conf))


def recorded(out: str) -> int:
    """Samples with a manifest line (a kill between a line and its rename, then the re-extraction,
    gives one sample two lines)."""
    try:
        with open(os.path.join(out, "manifest.jsonl")) as f:
            return len({json.loads(line)["idx"] for line in f if line.strip()})
    except FileNotFoundError:
        return 0


def tensors(conf: str) -> dict[int, dict]:
    from runner.codec.ckpt import load_sample
    from runner.output.store import find_sample

    out = out_dir(conf)
    with open(os.path.join(out, "dataset.json")) as f:
        total = json.load(f)["total"]
    res = {}
    for i in range(total):
        p = find_sample(out, i)
        if os.path.exists(p):
            res[i] = load_sample(p, mmap=False)
    return res


def assert_same_tensors(a: dict[int, dict], b: dict[int, dict]) -> None:
    import torch

    assert sorted(a) == sorted(b), f"different samples: {set(a) ^ set(b)}"
    for i in a:
        for k in ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state"):
            assert a[i][k].dtype == b[i][k].dtype, (i, k)
            assert torch.equal(a[i][k], b[i][k]), f"sample {i} {k} differs"


def extract_in_process(cfg, dump_server, mode: str = "ok", vocab_size: int = 256):
    """The extractor alone, in this process, over the job's pre-tokenized rows (ids below
    vocab_size: no tokenizer is loaded) against the fake dump server in `mode`
    (tests/runner/fake_server.py): (extractor, store, error), error being the JobFailed that
    run() raised, if any."""
    import asyncio

    from runner.contract.errors import JobFailed
    from runner.data.dataset import open_dataset
    from runner.job.extractor import Extractor
    from runner.job.record import Recorder
    from runner.output.ranks import RunPaths
    from runner.output.store import Store

    store = Store(cfg.job.out)
    store.prepare()
    ds = open_dataset(cfg.job, vocab_size)
    try:
        total = len(ds)
        rec = Recorder(RunPaths(cfg.job.out), cfg.job.name, total, cfg.job.rate_window_s)
        ex = Extractor(cfg, ds, store, rec, dump_server(mode, store.tmp), store.tmp)
        asyncio.run(ex.run(store.plan(total).remaining))
    except JobFailed as e:
        return ex, store, e
    finally:
        ds.close()
    return ex, store, None


def server_pid(conf: str) -> int | None:
    try:
        with open(os.path.join(out_dir(conf), "server.pid")) as f:
            return int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def kill_group(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def unrecorded_ckpts(out: str) -> list[str]:
    """Files SpecForge would train on (every *.ckpt / *.ckpt.gz under out, hidden folders too)
    that are not a committed sample with its manifest line."""
    from runner.output.store import Store, find_sample

    # every manifest file: the job's and, after a cluster run, each rank's
    ok = {os.path.realpath(find_sample(out, idx)) for idx in Store(out).manifest()}
    found = [
        os.path.join(d, n)
        for d, _dirs, names in os.walk(out)
        for n in names
        if n.endswith((".ckpt", ".ckpt.gz"))
    ]
    return sorted(os.path.relpath(p, out) for p in found if os.path.realpath(p) not in ok)


def discovered(out: str) -> dict[int, list[str]]:
    """What SpecForge's discovery finds: every *.ckpt and *.ckpt.gz under out, by index."""
    from runner.output.store import FILE_RE

    seen: dict[int, list[str]] = {}
    for d, _dirs, names in os.walk(out):
        for n in names:
            if n.endswith((".ckpt", ".ckpt.gz")):
                m = FILE_RE.fullmatch(n)
                assert m, f"{n}: SpecForge would train on a file that is no sample"
                seen.setdefault(int(m.group(1)), []).append(os.path.join(d, n))
    return seen


def specforge_items(sf, out: str) -> dict[int, dict]:
    """Every sample as SpecForge's own discovery and offline loader see ``out`` now (``sf`` is
    specforge.data.preprocessing), by index: each index at most once, each file loaded by
    SpecForge's code (which swallows a load error and hands back item 0 instead: the caller
    compares the items with what was written, so a substitute shows)."""
    from runner.output.store import FILE_RE

    paths = sf.list_local_files(out)
    idx = [int(FILE_RE.fullmatch(os.path.basename(p)).group(1)) for p in paths]
    assert len(idx) == len(set(idx)), f"SpecForge lists a sample twice: {sorted(paths)}"
    ds = sf.OfflineEagle3Dataset(paths, max_len=1 << 20)
    return {i: ds[n] for n, i in enumerate(idx)}


def assert_items_equal(items: dict[int, dict], truth: dict[int, dict]) -> None:
    """SpecForge's items (target = hidden_state, hidden_state = aux) equal the samples written."""
    import torch

    for i, item in items.items():
        t = truth[i]
        assert torch.equal(item["input_ids"][0], t["input_ids"]), i
        assert torch.equal(item["loss_mask"][0, :-1], t["loss_mask"][:-1]), i  # it zeroes the last
        assert torch.equal(item["target"], t["hidden_state"]), i
        assert torch.equal(item["hidden_state"], t["aux_hidden_state"]), i


def held_box(tmp_path, monkeypatch, holders: dict[str, int], refuse: dict[str, str] | None = None) -> str:
    """A GPU box for hsx-runner processes started from here: NVML (the stub) shows one 70 GB
    process per GPU, in the systemd units given ({unit: GPUs}; a key that begins with '/' is
    the whole cgroup path), and `systemctl` on PATH stops and disables any unit but those in
    ``refuse`` ({unit: stderr}). Called again, the GPUs change hands. Returns the file where
    each systemctl call is recorded."""
    from runner.serve import gpus

    units = [u for u, n in holders.items() for _ in range(n)]
    devices = [
        {"used_mib": 70_000, "total_mib": 81_559, "procs": [{"pid": 9000 + i, "used_mib": 70_000, "comm": "python3",
                                                              "cgroup": f"0::{u if u.startswith('/') else '/system.slice/' + u}\n"}]}
        for i, u in enumerate(units)
    ]  # fmt: skip
    (tmp_path / "nvml.json").write_text(json.dumps({"gpus": devices}))
    monkeypatch.setenv(gpus.STUB_ENV, str(tmp_path / "nvml.json"))
    calls = tmp_path / "systemctl.calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "systemctl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        "for unit; do :; done\n"  # the last argument
        + "".join(
            f'if [ "$unit" = "{u}" ]; then echo "{why}" >&2; exit 1; fi\n'
            for u, why in (refuse or {}).items()
        )
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return str(calls)
