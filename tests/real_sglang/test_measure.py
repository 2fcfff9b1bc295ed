"""The draft measured where it serves (`hsx-runner measure`): the real SGLang on this CPU, the
demo's Llama in fp32 alone and with an EAGLE-3 draft at two settings (a chain and a tree), each
a fresh server. The draft (eagle3_draft.py, ``echo``) is the target's own last layer fed the layer
before it: its guesses are often right, so the accept path (accepted tokens' KV, the tree's deeper
rows) is walked, not just the root; speculation must change no greedy output.

The supervisor is killed with -9 mid-way and resumed, and the last setting's SGLang server is
killed too: no request is lost or measured twice, the server's death is counted and its server
started again, the accept length is the one recomputed from the kept meta_info, and with the
draft the greedy outputs equal the target alone's."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from runner import sglang_cpu
from runner.ports import free_port
from runner.serve import pidfile
from tests.conftest import runner, write_config
from tests.real_sglang import eagle3_draft
from tests.real_sglang.conftest import KERNELS
from tests.runner.helpers import runner_json, until

pytestmark = pytest.mark.slow
SETTINGS = ["3/1/4", "5/4/8"]  # a chain, and the tree SGLang picks for a Llama (the verify tree mask)
SAMPLES = 3


def _status(conf) -> dict:
    """`hsx-runner measure status`, in this process (a process per poll took a quarter of a core
    from the servers under test)."""
    code, st = runner_json("measure", conf, "status")
    assert code == 0, st
    return st


def _until(conf, ok, timeout_s=900.0) -> dict:
    """Polls the status, as an operator's `measure status` does, until ``ok(status)``."""

    def good(st):
        if ok(st):
            return True
        assert st["phase"] not in ("failed", "crashed"), st  # not asked for: it will not come good
        return False

    return until(lambda: _status(conf), good, timeout_s, 1.0, "the measurement")


def _kill_server_mid_last_setting(root: str, timeout_s: float = 900.0) -> None:
    """Kills the last setting's server while at least two of its requests are still unanswered.
    The supervisor (the only client, one request at a time) is frozen while its record and
    results are read, so what is read holds until the kill: a later request must meet the dead
    server however fast this machine answers (a poll between requests could miss them all)."""
    deadline = time.monotonic() + timeout_s
    most = SAMPLES * len(SETTINGS) + SAMPLES - 2  # at most the last setting's first answer kept
    path = os.path.join(root, "status.json")
    while time.monotonic() < deadline:
        pid = json.load(open(path)).get("pid")
        try:
            os.kill(pid, signal.SIGSTOP)
        except (ProcessLookupError, TypeError):  # the resumed supervisor not yet in the record
            time.sleep(0.05)
            continue
        try:
            st = json.load(open(path))
            assert st["phase"] not in ("done", "failed", "crashed"), st
            with open(st.get("results") or os.devnull) as f:
                lines = sum(1 for x in f if x.strip())
            if st["setting"] == SETTINGS[-1] and st["phase"] == "measuring" and lines <= most:
                os.kill(pidfile.live(os.path.join(root, "server.pid")), signal.SIGKILL)
                return
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"the last setting was not measured within {timeout_s}s")


def test_a_measurement_killed_mid_way_resumes_to_the_same_requests_once(tmp_path, demo_assets, sglang_python):
    draft = eagle3_draft.build(
        str(demo_assets / "model"), str(tmp_path / "draft"), aux_layer_ids=(1, 3, 6), echo=True
    )
    server = sglang_cpu.server_section("llama", sglang_python, KERNELS)
    server |= {"port": free_port(), "start_timeout_s": 600.0, "max_restarts": 2}
    server["extra_args"] = [*server["extra_args"], "--dtype", "float32"]  # fp32: equal greedy outputs
    job = {
        "model": str(demo_assets / "model"),
        "dataset": str(demo_assets / "data.jsonl"),
        "out": str(tmp_path / "out"),
    }
    measure = {"draft": draft, "samples": SAMPLES, "max_new_tokens": 16, "settings": SETTINGS}
    conf = write_config(tmp_path / "hsx.toml", job=job, server=server, measure=measure)

    p = runner("measure", "start", "--json", "--config", conf)
    assert p.returncode == 0 and json.loads(p.stdout)["started"], p.stdout + p.stderr
    st = _until(conf, lambda s: s["done"] >= SAMPLES + 1)  # into the first speculative setting
    os.kill(st["pid"], signal.SIGKILL)
    crashed = _until(conf, lambda s: s["phase"] == "crashed", 60.0)
    assert "measuring supervisor" in crashed["reason"] and crashed["done"] >= SAMPLES + 1
    assert runner("measure", "resume", "--json", "--config", conf).returncode == 0
    # the last setting's server killed: named, restarted, counted, and its requests go on
    _kill_server_mid_last_setting(crashed["run_dir"])
    st = _until(conf, lambda s: s["phase"] in ("done", "failed"))
    assert st["restarts"] == 1 and st["last_death"].startswith("server died"), st
    assert st["phase"] == "done", st

    total = SAMPLES * (1 + len(SETTINGS))
    lines = [json.loads(x) for x in open(st["results"]) if x.strip()]
    keys = [(r["setting"], r["prompt"]) for r in lines]
    assert len(keys) == len(set(keys)) == total and st["done"] == st["total"] == total
    base = {r["prompt"]: r["output_ids"] for r in lines if r["setting"] == "none"}
    # the target alone's top two at each token (a later difference is judged by them), asked apart
    # from its timed request; each request streamed, its first event's time kept
    alone = [r for r in lines if r["setting"] == "none"]
    assert all(len(r["top_logprobs"]) == len(r["output_ids"]) for r in alone)
    assert all(len(t) == 2 for r in alone for t in r["top_logprobs"])
    assert not any(r["meta_info"].get("output_top_logprobs") for r in lines)  # none timed with logprobs
    assert all(0 < r["ttft_s"] <= r["latency_s"] for r in lines)
    assert all(f["ttft_s"] > 0 for f in st["settings"])
    by = {f["setting"]: f for f in st["settings"]}
    for s in SETTINGS:
        mine = [r for r in lines if r["setting"] == s]
        tokens = sum(r["meta_info"]["completion_tokens"] for r in mine)
        verify = sum(r["meta_info"]["spec_verify_ct"] for r in mine)
        assert by[s]["accept_length"] == pytest.approx(tokens / verify) and by[s]["accept_length"] >= 1.0
        assert [r["output_ids"] for r in mine] == [base[r["prompt"]] for r in mine]  # fp32: no near-ties
        assert by[s]["same"] == SAMPLES and by[s]["differ"] == []
    assert st["best"] in SETTINGS and st["accept_length"] == by[st["best"]]["accept_length"]
    assert "--speculative-draft-model-path" in st["serve_command"] and "intel_amx" in st["serve_command"]
    assert _status(conf)["phase"] == "done" and runner("measure", "resume", "--config", conf).returncode == 3
