"""The patched server inside the real SGLang 0.5.23 scheduler writes what the reference
backend writes: the product's own path (backend "sglang", [server] python = the SGLang venv,
[server] tp_size), several requests per batch, uneven lengths, concurrency 4, for a Llama, a
DeepSeek-V3 and Kimi-K2.5's own wrapper class, at TP 1 and TP 2 (one scheduler process per
rank, exactly one of them writing)."""

from __future__ import annotations

import json
import os
import re

import pytest

from runner import sglang_cpu
from tests.conftest import runner, write_job
from tests.real_sglang.compare import compare
from tests.real_sglang.conftest import DTYPE, KERNELS
from tests.runner.helpers import done_count, out_dir, verify

SAMPLES = 16
ARCH_CLASS = {
    "llama": "LlamaForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "kimi_k25": "KimiK25ForConditionalGeneration",
}


def jobs(tmp_path, demo_assets, model: str, arch: str, python: str, samples=SAMPLES, extra=(), tp=1, **kw):
    """(the SGLang job, the reference backend's job) on the same model and rows."""
    sg = sglang_cpu.server_section(arch, python, KERNELS, tp=tp)
    dtype = DTYPE[arch]
    common = dict(
        job__model=model, job__dtype=dtype, job__concurrency=4, job__max_length=512,
        job__trust_remote_code=arch == "kimi_k25", **kw,
    )  # fmt: skip
    a = write_job(
        tmp_path / "sglang", demo_assets, samples, server__backend="sglang", server__python=sg["python"],
        server__tp_size=tp, server__extra_args=[*sg["extra_args"], "--dtype", dtype, *extra],
        server__env=sg["env"], server__start_timeout_s=300.0, **common,
    )  # fmt: skip
    b = write_job(tmp_path / "reference", demo_assets, samples, server__dtype=dtype, **common)
    return a, b


def server_log(conf: str) -> str:
    with open(os.path.join(out_dir(conf), "logs", "server.log")) as f:
        return f.read()


def writers(conf: str) -> set[str]:
    with open(os.path.join(out_dir(conf), "manifest.jsonl")) as f:
        return {json.loads(line)["writer"] for line in f if line.strip()}


def assert_one_writer(conf: str, tp: int) -> None:
    """Every rank ran the patch; only TP0 wrote, each sample once, and nothing else is left."""
    log = server_log(conf)
    for r in range(tp):
        assert re.search(rf"hsx dump patch installed in TP{r} pid \d+ \(writer={r == 0}", log), r
    assert {w.split(" pid ")[0] for w in writers(conf)} == {"TP0"}, writers(conf)
    with open(os.path.join(out_dir(conf), "manifest.jsonl")) as f:
        idx = [json.loads(line)["idx"] for line in f if line.strip()]
    assert sorted(idx) == list(range(done_count(conf))), "a sample committed twice"
    assert os.listdir(os.path.join(out_dir(conf), ".tmp")) == [], "a stray dump file"


@pytest.mark.parametrize(
    "arch,tp,ids,extra,storage",
    [  # Llama with the default ids at TP 2, raw: the kill -9 test (test_tp_faults.py)
        (  # chunked: pieces joined in the hook; rounded to 4 mantissa bits and gzipped by the patch
            "llama",
            2,
            [0, 2, 5],
            ["--chunked-prefill-size", "64"],
            "ckpt.gz:4",
        ),
        # the same DeepSeek-V3 inside the wrapper, which passes the capture through to it, with the
        # default ids; gzipped by the patch's writer threads (the reference backend's stay raw)
        ("kimi_k25", 2, [], [], "ckpt.gz"),
    ],
)
def test_dumps_equal_the_reference_backend(
    tmp_path, demo_assets, models, sglang_python, arch, tp, ids, extra, storage
):
    sg, ref = jobs(
        tmp_path, demo_assets, models[arch], arch, sglang_python, extra=extra, tp=tp, job__aux_layer_ids=ids
    )
    storage, _, bits = storage.partition(":")  # "ckpt.gz:4": that storage and 4 mantissa bits
    if storage != "ckpt":
        with open(sg) as f:
            text = f.read()
        keys = f'storage = "{storage}"\n' + (f"mantissa_bits = {bits}\n" if bits else "")
        with open(sg, "w") as f:
            f.write(text.replace("[job]\n", "[job]\n" + keys, 1))
    runner("run", "--config", sg, check=True, timeout=600)
    runner("run", "--config", ref, check=True, timeout=600)
    assert verify(sg)[0] == 0 and done_count(sg) == SAMPLES
    with open(os.path.join(out_dir(sg), "dataset.json")) as f:
        info = json.load(f)
    assert info["aux_layer_ids"] == (ids or [1, 3, 4])  # 8 layers: [1, N//2-1, N-4]
    assert info["mantissa_bits"] == int(bits or 7)  # and verify found no value with more bits
    log = server_log(sg)
    assert re.search(r"Prefill batch, #new-seq: [2-9]", log), "no prefill batch held more than one request"
    assert f"{ARCH_CLASS[arch]} captures the outputs of layers {info['aux_layer_ids']}" in log
    assert_one_writer(sg, tp)
    suffix = ".ckpt.gz" if storage == "ckpt.gz" else ".ckpt"
    assert all(n.endswith(suffix) for n in os.listdir(os.path.join(out_dir(sg), "rows_0-2000")))
    worst = compare(out_dir(sg), out_dir(ref), int(bits) if bits else None)
    print(f"\n{arch} TP {tp} ids {info['aux_layer_ids']} {extra}: {worst}")
