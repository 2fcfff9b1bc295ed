"""Everything ``hsx demo`` needs, built offline from a seed: a synthetic conversation
dataset, a BPE tokenizer trained on it with a chat template, a tiny randomly initialised
Llama (config in runner/assets), and the job's hsx.toml. Same seed, same bytes."""

from __future__ import annotations

import json
import os
import random
import re
from importlib import resources

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<unk>", "<pad>", "<s>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
VOCAB_SIZE = 600
# `hsx demo` sets it for the reference server it starts: each answer comes no sooner than this
# many seconds after its request, a slower model the status record's rate and ETA measure as any
PACE_ENV = "HSX_DEMO_PACE_S"


def _words(rng: random.Random, n: int) -> list[str]:
    syll = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "dan", "gel", "hor", "zu", "qi", "bar"]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(n)]


def make_conversations(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    lex = _words(rng, 300)

    def sentence() -> str:
        return " ".join(rng.choice(lex) for _ in range(rng.randint(4, 40))) + rng.choice([".", "?", "!"])

    rows = []
    for _ in range(n):
        turns = []
        if rng.random() < 0.3:
            turns.append({"role": "system", "content": sentence()})
        for _ in range(rng.randint(1, 3)):
            turns.append({"role": "user", "content": " ".join(sentence() for _ in range(rng.randint(1, 3)))})
            turns.append(
                {"role": "assistant", "content": " ".join(sentence() for _ in range(rng.randint(1, 6)))}
            )
        rows.append({"conversations": turns})
    return rows


def build_tokenizer(texts: list[str], out_dir: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="<|end|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


# Tiny architectures, each a config.json in runner/assets: the demo's Llama, and a
# DeepSeek-V3 (MLA, MoE with a shared expert, a dense first layer) like the seeds' target.
ARCHS = {"llama": "tiny_llama.json", "deepseek_v3": "tiny_deepseek_v3.json"}
# Keys SGLang reads that transformers' DeepseekV3Config does not write.
SGLANG_DEEPSEEK_KEYS = {"moe_layer_freq": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid"}


def build_model(
    seed: int,
    vocab_size: int,
    out_dir: str,
    arch: str = "llama",
    dtype: str = "bfloat16",
    overrides: dict | None = None,
    random_norms: bool = False,
) -> None:
    """A tiny random model of ``arch`` (config in runner/assets, ``overrides`` on top).
    ``random_norms``: norm weights drawn too (all-ones norms make pre- and post-norm states
    differ in scale only, which a check comparing them could not tell apart)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    cfg = json.loads(resources.files("runner").joinpath(f"assets/{ARCHS[arch]}").read_text())
    cfg.update(overrides or {}, vocab_size=vocab_size, torch_dtype=dtype)
    if "rope_scaling" in cfg:
        cfg["rope_scaling"]["original_max_position_embeddings"] = cfg["max_position_embeddings"]
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # a zero routing bias would leave noaux_tc's correction untested
        for name, p in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith("e_score_correction_bias"):
                p.uniform_(-0.5, 0.5)
            elif random_norms and name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.to(getattr(torch, dtype)).save_pretrained(out_dir, safe_serialization=True)
    if arch == "deepseek_v3":
        path = os.path.join(out_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        saved.update(SGLANG_DEEPSEEK_KEYS)
        saved.setdefault("rope_scaling", cfg["rope_scaling"])  # SGLang's CPU rotary path: yarn only
        with open(path, "w") as f:
            json.dump(saved, f, indent=2)


def _server_toml(server: dict | None) -> str:
    if not server:
        return (
            'backend = "reference"\ndevice = "cpu"\ndtype = "bfloat16"\nthreads = 1\nstart_timeout_s = 300.0'
        )
    env = ", ".join(f"{k} = {json.dumps(v)}" for k, v in server["env"].items())
    return "\n".join(
        [
            'backend = "sglang"',
            f"python = {json.dumps(server['python'])}",
            f"tp_size = {int(server.get('tp_size', 1))}",
            f"extra_args = {json.dumps(server['extra_args'])}",
            f"env = {{ {env} }}",
            "start_timeout_s = 600.0",
        ]
    )


def toml_for(workdir: str, concurrency: int = 4, server: dict | None = None, trust: bool = False) -> str:
    return f"""# Written by `hsx demo`: the whole loop on this machine, tiny model.
[job]
name = "demo"
model = "model"
dataset = "data.jsonl"
out = "out"
trust_remote_code = {"true" if trust else "false"}  # the target's tokenizer is code in model/
max_length = 512
concurrency = {concurrency}
status_interval_s = 1.0
rate_window_s = 30.0

[server]
{_server_toml(server)}
port = {_free_port()}

[remote]
transport = "local"  # the job is this file: the directory can be copied or moved
runner = "{_runner_path()}"

[slack]
operators = ["console"]
audit_log = "audit.jsonl"

[watcher]
interval_s = 2.0
state_file = "watcher.json"
"""


def relocate(workdir: str) -> str | None:
    """A demo copied or moved here still names the directory it came from: the paths its
    output pins (out/dataset.json) and an older hsx's [remote] runner_config. The copy holds the
    same files, so they are rewritten to name this one, and its server gets a port of its own; a
    path that is not this demo's own file at the same place is refused. Returns the directory it came from, None if it did not move."""
    from .contract.atomic import write_atomic
    from .contract.config import load

    workdir = os.path.abspath(workdir)
    conf = os.path.join(workdir, "hsx.toml")
    cfg = load(conf)
    pinned = os.path.join(workdir, "out", "dataset.json")
    desc = {}
    if os.path.exists(pinned):
        with open(pinned) as f:
            desc = json.load(f)
    named = [(conf, "[remote] runner_config", cfg.remote.runner_config, conf)]
    named += [
        (pinned, key, desc.get(key), getattr(cfg.job, key)) for key in ("model", "tokenizer", "dataset")
    ]
    came_from = set()
    for file, what, have, want in named:
        if not have or have == want:
            continue
        rel = os.path.relpath(want, workdir)
        if rel.startswith("..") or not have.endswith(os.sep + rel):
            raise SystemExit(
                f"hsx demo: {file} names {have} as the {what}, not {want}; use another --workdir, "
                f"or remove {os.path.dirname(file)} to start over"
            )
        came_from.add(have[: -len(rel) - 1])
    if not came_from:
        return None
    if len(came_from) > 1:
        raise SystemExit(
            f"hsx demo: {workdir}'s files name several directories ({', '.join(sorted(came_from))})"
        )
    with open(conf) as f:
        text = f.read()
    text = re.sub(r"(?m)^runner_config = .*\n", "", text)
    # A fresh port too: the original may be running, and its server holds the one copied.
    write_atomic(conf, re.sub(r"(?m)^port = \d+$", f"port = {_free_port()}", text))
    if desc:
        moved = {k: getattr(cfg.job, k) for k in ("model", "tokenizer", "dataset")}
        write_atomic(pinned, json.dumps({**desc, **moved}, indent=1) + "\n")
    return came_from.pop()


def _runner_path() -> str:
    """The hsx-runner beside this interpreter (a venv's bin is often not on PATH)."""
    import shutil
    import sys

    here = os.path.join(os.path.dirname(sys.executable), "hsx-runner")
    return here if os.path.exists(here) else (shutil.which("hsx-runner") or "hsx-runner")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(workdir: str, samples: int, seed: int, server: dict | None = None, target: str = "demo") -> str:
    """Create the demo job in workdir unless it is already there; return the config path.
    ``server``: [server] keys for the real SGLang (runner.sglang_cpu), else the reference backend.
    ``target``: "demo" (the quickest) or a real family's shape from runner/targets.py."""
    os.makedirs(workdir, exist_ok=True)
    conf = os.path.join(workdir, "hsx.toml")
    stamp = os.path.join(workdir, "demo.json")
    want = {
        "samples": samples,
        "seed": seed,
        "backend": "sglang" if server else "reference",
        "target": target,
        "tp": int(server.get("tp_size", 1)) if server else 1,
    }
    if os.path.exists(conf) and os.path.exists(stamp):
        with open(stamp) as f:
            have = json.load(f)
        have.setdefault("backend", "reference")  # demos built before --backend
        have.setdefault("target", "demo")  # and before --target
        have.setdefault("tp", 1)  # and before --tp
        if have == want:
            return conf
        raise SystemExit(
            f"{workdir} holds a demo built with {have}; use another --workdir or the same options"
        )
    model_dir, data = os.path.join(workdir, "model"), os.path.join(workdir, "data.jsonl")
    if target == "demo":
        rows = make_conversations(seed, samples)
        with open(data, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        texts = [t["content"] for r in rows for t in r["conversations"]]
        tok = build_tokenizer(texts, model_dir)
        build_model(seed, len(tok), model_dir)
    else:
        from . import targets

        targets.build(target, model_dir, data, samples, seed)
    from .layers import remote_code

    with open(conf, "w") as f:
        f.write(toml_for(workdir, server=server, trust=bool(remote_code(model_dir))))
    with open(stamp, "w") as f:
        json.dump(want, f)
    return conf
