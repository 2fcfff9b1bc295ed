"""The real SGLang 0.5.23 on the CPU lane serves an EAGLE-3 draft (speculative decoding) beside
the demo's tiny Llama, through the lane's flags (runner.sglang_cpu.draft_args) and the stand-in's
EAGLE ops (tests/sglang_cpu/sgl_kernel): a chain (topk 1) and a tree (topk 4, the verify pass's
tree mask), each against the same target served without a draft, in fp32, greedy.

The draft (tests/real_sglang/eagle3_draft.py, ``echo``) is the target's own last layer and head
fed the layer before it: its first guess is "repeat the last token", which the tiny target's
loops accept, so the accept path (accepted tokens' KV, the tree's deeper rows) is walked, not
just the root. Speculation must not change a greedy output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from runner import sglang_cpu
from tests.conftest import free_port
from tests.real_sglang import eagle3_draft
from tests.real_sglang.conftest import KERNELS

# (steps, topk, draft tokens): SGLang's names. 5/4/8 is what SGLang picks for a Llama.
SETTINGS = {"chain": (3, 1, 4), "tree": (5, 4, 8)}
PROMPTS = 6  # the first user turns of the demo's dataset
NEW_TOKENS = 24
START_TIMEOUT_S = 900  # three servers starting at once on two shared cores: minutes each
AUX = (1, 3, 6)  # the echo draft reads the output of layer 6, the input of the target's last


class Server:
    def __init__(self, python: str, model: str, extra: list[str], log: str):
        self.port = free_port()
        self.log = log
        env = {**os.environ, **sglang_cpu.ENV, "PYTHONPATH": KERNELS}
        cmd = [python, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
               "--port", str(self.port), "--dtype", "float32", "--disable-radix-cache", *extra]  # fmt: skip
        self.started = time.monotonic()
        with open(log, "w") as f:  # its own session: stopped as a group, scheduler children included
            self.proc = subprocess.Popen(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.ready_s: float | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def poll_ready(self) -> bool:
        """True once /health_generate answers 200 (a real generation ran); raises if it died."""
        if self.proc.poll() is not None:
            raise AssertionError(f"SGLang exited {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.url("/health_generate"), timeout=10) as r:
                ok = r.status == 200
        except (urllib.error.URLError, OSError):
            return False
        if ok:
            self.ready_s = time.monotonic() - self.started
        return ok

    def generate(self, text: str) -> dict:
        body = {
            "text": text,
            "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True},
        }
        req = urllib.request.Request(
            self.url("/generate"), json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.load(r)

    def tail(self, n: int = 3000) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-n:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=60)
        try:  # children left in the group (SGLang's scheduler, detokenizer)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def servers(sglang_python, demo_assets, tmp_path_factory):
    """{"plain" | "chain" | "tree": a ready Server}, started together, stopped at the end."""
    model = str(demo_assets / "model")
    work = tmp_path_factory.mktemp("eagle3")
    draft = eagle3_draft.build(model, str(work / "draft"), seed=0, aux_layer_ids=AUX, echo=True)
    plain = [*sglang_cpu.ARGS, *sglang_cpu.SPECULATIVE]  # the same attention kernels, no draft
    extra = {"plain": plain, **{k: sglang_cpu.draft_args(draft, *v) for k, v in SETTINGS.items()}}
    running: dict[str, Server] = {}
    try:
        for name, args in extra.items():
            running[name] = Server(sglang_python, model, args, str(work / f"{name}.log"))
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = set(running)
        while waiting:
            waiting = {n for n in waiting if not running[n].poll_ready()}
            if waiting and time.monotonic() > deadline:
                raise AssertionError(f"not ready in {START_TIMEOUT_S}s: {sorted(waiting)}")
            if waiting:
                time.sleep(1)  # the next health poll; the event is the 200 (or the exit) above
        yield running
    finally:
        for s in running.values():
            s.stop()


@pytest.fixture(scope="module")
def answers(servers, demo_assets):
    """{server name: [/generate's answer per prompt]}: the same prompts, one at a time to each
    server, the servers side by side (one waits on its Python while another computes)."""
    with open(demo_assets / "data.jsonl") as f:
        prompts = [json.loads(line)["conversations"][0]["content"] for line in f][:PROMPTS]
    with ThreadPoolExecutor(len(servers)) as pool:
        jobs = {
            name: pool.submit(lambda s: [s.generate(p) for p in prompts], s) for name, s in servers.items()
        }
        out = {name: job.result() for name, job in jobs.items()}
    for name, s in servers.items():
        rows = out[name]
        if name != "plain":
            verify = sum(r["meta_info"]["spec_verify_ct"] for r in rows)
            done = sum(r["meta_info"]["completion_tokens"] for r in rows)
            print(f"{name} {SETTINGS[name]}: ready in {s.ready_s:.0f}s, accept length {done}/{verify} "
                  f"= {done / verify:.3f}")  # fmt: skip
        else:
            print(f"plain: ready in {s.ready_s:.0f}s")
    return out


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_the_draft_changes_no_greedy_output(answers, setting):
    assert [r["output_ids"] for r in answers[setting]] == [r["output_ids"] for r in answers["plain"]]
    assert all(len(r["output_ids"]) == NEW_TOKENS for r in answers["plain"])


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_speculation_is_reported_and_accepts_drafts(answers, setting):
    steps, topk, draft_tokens = SETTINGS[setting]
    rows = answers[setting]
    for r in rows:
        m = r["meta_info"]
        assert m["spec_verify_ct"] > 0 and m["completion_tokens"] == NEW_TOKENS, m
        accept = m["completion_tokens"] / m["spec_verify_ct"]
        assert accept == pytest.approx(m["spec_accept_length"]) and 1.0 <= accept <= steps + 1, m
        assert m["spec_num_proposed_drafts"] == m["spec_verify_ct"] * (draft_tokens - 1), m
        assert sum(m["spec_correct_drafts_histogram"]) == m["spec_verify_ct"], m
    for m in (r["meta_info"] for r in answers["plain"]):
        assert "spec_verify_ct" not in m or m["spec_verify_ct"] == 0, m
    # the echo draft's "repeat" is right where the target loops on one token: drafts accepted
    verify = sum(r["meta_info"]["spec_verify_ct"] for r in rows)
    assert sum(r["meta_info"]["spec_num_correct_drafts"] for r in rows) > 0
    assert sum(r["meta_info"]["completion_tokens"] for r in rows) / verify > 1.0
