"""The patched server inside the real SGLang 0.5.23 scheduler writes what the reference
backend writes: the product's own path (backend "sglang", [server] python = the SGLang venv),
several requests per batch, uneven lengths, concurrency 4, for a Llama and a DeepSeek-V3."""

from __future__ import annotations

import json
import os
import re

import pytest

from runner import sglang_cpu
from tests.conftest import runner, write_job
from tests.real_sglang.compare import compare
from tests.real_sglang.conftest import DTYPE, KERNELS
from tests.runner.helpers import (
    done_count,
    kill_group,
    out_dir,
    server_pid,
    start_run,
    status,
    verify,
    wait_for,
)

SAMPLES = 16


def _jobs(tmp_path, demo_assets, model: str, arch: str, python: str, samples=SAMPLES, extra=(), **kw):
    sg = sglang_cpu.server_section(arch, python, KERNELS)
    dtype = DTYPE[arch]
    common = dict(job__model=model, job__dtype=dtype, job__concurrency=4, job__max_length=512, **kw)
    a = write_job(
        tmp_path / "sglang", demo_assets, samples, server__backend="sglang", server__python=sg["python"],
        server__extra_args=[*sg["extra_args"], "--dtype", dtype, *extra], server__env=sg["env"],
        server__start_timeout_s=300.0, **common,
    )  # fmt: skip
    b = write_job(tmp_path / "reference", demo_assets, samples, server__dtype=dtype, **common)
    return a, b


def _batched(conf: str) -> bool:
    with open(os.path.join(out_dir(conf), "logs", "server.log")) as f:
        return bool(re.search(r"Prefill batch, #new-seq: [2-9]", f.read()))


@pytest.mark.parametrize(
    "arch,ids,extra",
    [  # Llama with the default ids: the kill -9 test below
        ("llama", [0, 2, 5], ["--chunked-prefill-size", "64"]),  # chunked: pieces joined in the hook
        ("deepseek_v3", [], []),
        ("deepseek_v3", [2, 3, 5], []),  # smallest id not 1: DeepSeek's own rule would shift none
    ],
)
def test_dumps_equal_the_reference_backend(tmp_path, demo_assets, models, sglang_python, arch, ids, extra):
    sg, ref = _jobs(
        tmp_path, demo_assets, models[arch], arch, sglang_python, extra=extra, job__aux_layer_ids=ids
    )
    runner("run", "--config", sg, check=True, timeout=600)
    runner("run", "--config", ref, check=True, timeout=600)
    assert verify(sg)[0] == 0 and done_count(sg) == SAMPLES
    with open(os.path.join(out_dir(sg), "dataset.json")) as f:
        info = json.load(f)
    assert info["aux_layer_ids"] == (ids or [1, 3, 4])  # 8 layers: [1, N//2-1, N-4]
    assert _batched(sg), "no prefill batch held more than one request"
    worst = compare(out_dir(sg), out_dir(ref))
    print(f"\n{arch} ids {info['aux_layer_ids']} {extra}: {worst}")


def test_server_killed_mid_run_restarts_and_the_output_matches(tmp_path, demo_assets, models, sglang_python):
    samples = 60
    sg, ref = _jobs(tmp_path, demo_assets, models["llama"], "llama", sglang_python, samples=samples)
    p = start_run(sg)
    try:
        wait_for(lambda: done_count(sg) >= 5, timeout=300, what="5 samples through the real SGLang")
        pid = server_pid(sg)
        assert pid is not None and done_count(sg) < samples
        kill_group(pid)  # kill -9 of the whole server: tokenizer manager, scheduler, detokenizer
        assert p.wait(timeout=600) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            kill_group(p.pid)
    st = status(sg)
    assert st["phase"] == "done" and st["server"]["restarts"] == 1, st
    assert verify(sg)[0] == 0 and done_count(sg) == samples
    runner("run", "--config", ref, check=True, timeout=600)
    compare(out_dir(sg), out_dir(ref))
