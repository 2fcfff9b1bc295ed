"""Everything ``hsx demo`` needs in its workdir: the tiny model and dataset (``tiny``, or a real
family's shape from ``targets``) and the job's hsx.toml, built once and kept; a copied workdir's
paths rewritten to its own."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

from ..ports import free_port
from .tiny import build_model, build_tokenizer, make_conversations

# `hsx demo` sets it for the reference server it starts: each answer comes no sooner than this
# many seconds after its request, a slower model the status record's rate and ETA measure as any
PACE_ENV = "HSX_DEMO_PACE_S"


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


def _measured(samples: int) -> tuple[str, str]:
    """With SGLang, the draft measured where it serves, by itself at the training's end: [train]'s
    lines for it (a few samples held out, so the simulated figure reads beside the measured one)
    and its [measure] section."""
    train = f"eval_samples = {max(1, min(20, samples // 4))}\nmeasure_at_end = true  # then /measure status\n"
    measure = (
        "\n[measure]  # the draft in SGLang against the target alone (/measure start; by itself after /train)\n"
        'samples = 4\nmax_new_tokens = 16\nsettings = ["3/1/4", "2/2/4"]\n'
    )
    return train, measure


def _pipeline(stages: list[str] | None, tokens: int) -> str:
    """The demo's [regenerate] and [pipeline]: one command from its prompts to a trained (and, with
    SGLang, measured) draft. None, or the extraction alone: no pipeline, the extraction as before."""
    if not stages or stages == ["extract"]:
        return ""
    return (
        "\n[regenerate]  # the target writes the answers again (the demo's data.jsonl -> data.regenerated.jsonl)\n"
        f"max_new_tokens = {tokens}  # per answer\nconcurrency = 8\n"
        f"\n[pipeline]  # hsx demo starts it; `/pipeline start` resumes it where it stopped\nstages = {json.dumps(stages)}\n"
    )


def toml_for(
    workdir: str, concurrency: int = 4, server: dict | None = None, trust: bool = False, samples: int = 0,
    stages: list[str] | None = None,
) -> str:  # fmt: skip
    train, measure = _measured(samples) if server else ("", "")
    measure += _pipeline(stages, 24)  # short answers: the demo's stages a few minutes each
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
port = {free_port()}

[remote]
transport = "local"  # the job is this file: the directory can be copied or moved
runner = "{_runner_path()}"

[slack]
operators = ["console"]
audit_log = "audit.jsonl"

[watcher]
interval_s = 2.0
state_file = "watcher.json"

[train]  # the draft, trained on out/ by SpecForge on this CPU (its venv built at the first start)
python = "{_train_python()}"
epochs = 3
max_steps = 120
save_interval = 20
log_interval = 1  # every step's acc: the running mean "progress?" says shows the draft learn
learning_rate = 0.003  # the tiny draft learns within the demo's 120 steps
{train}
[train.specforge.training]
ttt_length = 3  # the draft's unrolled steps: fewer than SpecForge's 7, a CPU's minute
{measure}"""


def _train_python() -> str:
    from .. import specforge_cpu
    from ..lanes import default_root

    return os.path.join(specforge_cpu.venv_dir(default_root()), "bin", "python")


def relocate(workdir: str) -> str | None:
    """A demo copied or moved here still names the directory it came from: the paths its
    output pins (out/dataset.json) and an older hsx's [remote] runner_config. The copy holds the
    same files, so they are rewritten to name this one, and its server gets a port of its own; a
    path that is not this demo's own file at the same place is refused. Returns the directory it came from, None if it did not move."""
    from ..contract.atomic import write_atomic
    from ..contract.config import load

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
    write_atomic(conf, re.sub(r"(?m)^port = \d+$", f"port = {free_port()}", text))
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


def build(
    workdir: str,
    samples: int,
    seed: int,
    server: dict | None = None,
    target: str = "demo",
    say: Callable[[str], None] | None = None,
    stages: list[str] | None = None,
) -> str:
    """Create the demo job in workdir unless it is already there; return the config path.
    ``server``: [server] keys for the real SGLang (runner.sglang_cpu), else the reference backend.
    ``target``: "demo" (the quickest) or a real family's shape from runner/data/targets.py.
    ``stages``: the pipeline its config runs (None or the extraction alone: none).
    What hsx derives (model/, data.jsonl, demo.json) is built again when missing; an hsx.toml
    already there is the user's and is never overwritten (``say`` is told it was kept)."""
    os.makedirs(workdir, exist_ok=True)
    conf = os.path.join(workdir, "hsx.toml")
    stamp = os.path.join(workdir, "demo.json")
    model_dir, data = os.path.join(workdir, "model"), os.path.join(workdir, "data.jsonl")
    want = {
        "samples": samples,
        "seed": seed,
        "backend": "sglang" if server else "reference",
        "target": target,
        "tp": int(server.get("tp_size", 1)) if server else 1,
    }
    kept = os.path.exists(conf)
    if kept and os.path.exists(stamp):
        with open(stamp) as f:
            have = json.load(f)
        have.setdefault("backend", "reference")  # demos built before --backend
        have.setdefault("target", "demo")  # and before --target
        have.setdefault("tp", 1)  # and before --tp
        if have != want:
            raise SystemExit(
                f"{workdir} holds a demo built with {have}; use another --workdir or the same options"
            )
        if os.path.exists(os.path.join(model_dir, "config.json")) and os.path.exists(data):
            return conf
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

    if kept:  # edited (say, storage = "ckpt.gz") or from an older hsx: the user's, not ours
        if say:
            say(f"keeping {conf} as it is (your edits stay); remove it for a fresh one")
    else:
        with open(conf, "w") as f:
            f.write(
                toml_for(
                    workdir, server=server, trust=bool(remote_code(model_dir)), samples=samples, stages=stages
                )
            )
    with open(stamp, "w") as f:
        json.dump(want, f)
    return conf
