"""The plain SGLang server's command line (no dump patch): the target alone or with the draft at
a speculative setting, with the job's [server] flags. The measurement runs it for each setting
(runner/measure), and the export says it as the command that serves the draft. On the CPU lane
(``--device cpu``) both get the lane's speculative attention, so the target alone is measured
with the very kernels the draft's server uses, and the command said works on that box."""

from __future__ import annotations

import os
import shlex
import sys

from ..contract.config import Config, without_secrets
from ..contract.launch import parse_flags
from ..contract.measure import NONE, parse_setting
from ..sglang_cpu import SPECULATIVE
from .server import text_only  # a multimodal wrapper (Kimi-K2.5) served text-only, as the dump's server is

ATTENTION = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")


def _lane(extra: list[str]) -> list[str]:
    """The job's extra_args; on the CPU lane its attention flags become the speculative ones."""
    if parse_flags(extra).get("--device") != [["cpu"]]:
        return extra
    out, it = [], iter(extra)
    for a in it:
        if a.partition("=")[0] in ATTENTION:
            if "=" not in a:
                next(it, None)
            continue
        out.append(a)
    return [*out, *SPECULATIVE]


def speculation(draft: str, setting: str) -> list[str]:
    if setting == NONE:
        return []
    steps, topk, tokens = parse_setting(setting)
    return [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
        "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(tokens),
    ]  # fmt: skip


def argv(cfg: Config, draft: str, setting: str) -> list[str]:
    s, j = cfg.server, cfg.job
    return [
        s.python or sys.executable, "-m", "sglang.launch_server", "--model-path", j.model,
        "--host", s.host, "--port", str(s.port), "--tp-size", str(s.tp_size),
        *(["--trust-remote-code"] if j.trust_remote_code else []),
        *_lane(text_only(j.model, list(s.extra_args))), *speculation(draft, setting),
    ]  # fmt: skip


def env(cfg: Config) -> dict[str, str]:
    return {**without_secrets(os.environ), **cfg.server.env}


def command(cfg: Config, draft: str, setting: str) -> str:
    """The server as it was run, to serve the draft with (its environment's own keys first)."""
    pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in cfg.server.env.items())
    return (pre + " " if pre else "") + shlex.join(argv(cfg, draft, setting))
