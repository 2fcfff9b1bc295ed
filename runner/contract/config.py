"""One TOML config for both sides: defaults live in the dataclasses, ``load()`` validates.

Unknown keys and wrong types are refused with the file, section and key named, so a typo
never silently falls back to a default. Relative paths resolve against the config's folder.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from .dump import BF16_MANTISSA_BITS, FILE_DTYPES, STORAGE
from .errors import ConfigError
from .stages import (  # noqa: F401 - the pipeline stages' sections, named here too
    AUTO_PYTHON,
    MeasureConfig,
    PipelineConfig,
    RegenerateConfig,
    TrainConfig,
    validate_measure,
    validate_pipeline,
    validate_regenerate,
)
from .status import STALE_S

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_VAR = "HSX_CONFIG"
DEFAULT_NAME = "hsx.toml"
# The bot's secrets (SLACK_BOT_TOKEN, SLACK_APP_TOKEN, SLACK_SIGNING_SECRET) come from its
# environment; no process on the GPU-box side is given them (SGLang, remote-code tokenizers).
SECRET_ENV_PREFIX = "SLACK_"


def without_secrets(env) -> dict[str, str]:
    """A copy of an environment without the bot's secrets."""
    return {k: v for k, v in env.items() if not k.startswith(SECRET_ENV_PREFIX)}


@dataclass
class JobConfig:
    name: str = "hsx"
    model: str = ""  # model directory (config.json + weights)
    tokenizer: str = ""  # defaults to the model directory
    trust_remote_code: bool = False  # let a model/tokenizer with auto_map run its own code
    dataset: str = ""  # JSONL input
    out: str = ""  # output directory = run directory (shards, manifest, status)
    max_length: int = 8192
    # a row longer than this many bytes fails with that reason, unread (8,192 tokens are ~100 KB)
    max_row_bytes: int = 4 << 20
    aux_layer_ids: list[int] = field(default_factory=list)  # empty: the draft config's, else SpecForge's
    draft_config: str = ""  # SpecForge draft-model config; its eagle_aux_hidden_state_layer_ids win
    dtype: str = "bfloat16"  # the files' float dtype (SpecForge trains on bf16), cast from the model's
    storage: str = "ckpt"  # "ckpt" (raw torch.save) or "ckpt.gz" (gzip of it; SpecForge reads both)
    mantissa_bits: int = 7  # bf16 files: 7 exact; fewer rounds to nearest even (lossy, still bf16)
    concurrency: int = 8  # requests in flight
    request_timeout_s: float = 600.0
    dump_wait_s: float = 300.0  # after an answer, how long the dump's files may take to appear
    retries: int = 4  # attempts per sample for transient errors
    max_consecutive_failures: int = 20  # then the job stops itself with the reason
    status_interval_s: float = 2.0
    rate_window_s: float = 120.0
    min_free_bytes: int = 0  # pause below this much free space on the output filesystem
    disk_recheck_s: float = 2.0  # while paused for disk: how often to look again (resume looks at once)
    # directories `adopt DIR` may take files from (DIR at or below one); empty: the folder holding `out`
    adopt_roots: list[str] = field(default_factory=list)


@dataclass
class ServerConfig:
    backend: str = "reference"  # "reference" (transformers) or "sglang"
    host: str = "127.0.0.1"
    port: int = 30000
    python: str = ""  # interpreter that runs the server; default: this one
    device: str = "cpu"  # reference backend: cpu or cuda
    dtype: str = "bfloat16"
    threads: int = 2  # reference backend on CPU: torch threads (fixed for determinism)
    tp_size: int = 1
    dp_size: int = 1
    mem_fraction: float = 0.85
    extra_args: list[str] = field(default_factory=list)
    # more environment for the server, e.g. {SGLANG_USE_CPU_ENGINE = "1"} for SGLang on a CPU box
    env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 1800.0
    max_restarts: int = 3


@dataclass
class RemoteConfig:
    transport: str = "local"  # "ssh" or "local" (the GPU box is this machine)
    host: str = ""
    port: int = 22
    user: str = "root"
    jump: str = ""  # user@host:port
    identity_file: str = ""
    known_hosts: str = "~/.ssh/known_hosts"
    runner: str = "hsx-runner"
    runner_config: str = ""  # the job's config on the GPU box (local transport: this file, unless set)
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0


@dataclass
class SlackConfig:
    channels: list[str] = field(default_factory=list)
    alert_channel: str = ""
    operators: list[str] = field(default_factory=list)
    operator_group: str = ""
    audit_log: str = ""
    team_id: str = ""  # the workspace (T...) the bot serves; set: requests from any other are refused


@dataclass
class WatcherConfig:
    interval_s: float = 30.0
    milestone_pct: int = 10
    heartbeat_stale_s: float = STALE_S
    unreachable_alert_s: float = 300.0
    stall_after_s: float = 300.0  # STALLED: no commit for max(this, 10 x the median sample time)
    rate_drop_after_s: float = 600.0  # a rate below half the run's median this long is an alert
    train_startup_s: float = 1800.0  # training silent this long while it loads (target head, vocab) is said
    state_file: str = ""


@dataclass
class DeployConfig:
    autostart: bool = (
        False  # start the runner at boot (systemd); off: a GPU service that starts itself can hold every GPU
    )
    python: str = "python3"  # interpreter on the GPU box that creates the venv
    deps_from: str = ""  # an interpreter on the box whose packages the venv reuses (no download)


@dataclass
class ClusterConfig:
    engine: str = "local"  # "local": this box; "slurm": one array task per rank
    ranks: int = 4  # array tasks; at most the extraction's 2000-sample shards, the regeneration's rows
    partition: str = ""
    gpus_per_node: int = 8  # sbatch --gpus-per-node (0: not asked for)
    time_limit: str = ""  # sbatch --time, e.g. "2-00:00:00"
    max_concurrent: int = 0  # the array's %N cap; 0: no cap
    requeue: bool = True  # preempted tasks go back to the queue and resume by themselves
    max_requeues: int = (
        3  # per task: requeued this often (before a time limit, a preemption, a node failure), then an alert
    )
    requeue_signal_s: int = 120  # Slurm signals a task this long before its time limit, to stop and requeue
    sbatch_args: list[str] = field(default_factory=list)  # more sbatch options, one per item
    python: str = ""  # interpreter on the compute nodes; default: the one running hsx-runner


@dataclass
class Config:
    job: JobConfig = field(default_factory=JobConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    slack: SlackConfig = field(default_factory=SlackConfig)
    watcher: WatcherConfig = field(default_factory=WatcherConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    regenerate: RegenerateConfig = field(default_factory=RegenerateConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    path: str = ""  # where it was loaded from

    @property
    def out(self) -> str:
        return self.job.out


_PATH_KEYS = {
    "job": ("model", "tokenizer", "dataset", "out", "draft_config"),
    "remote": ("identity_file", "known_hosts"),
    "slack": ("audit_log",),
    "watcher": ("state_file",),
    "cluster": ("python",),
    "deploy": (),  # paths on the GPU box: never resolved here
    "train": ("python", "envs_dir", "run_dir", "export_dir"),
    "measure": ("draft", "run_dir", "prompts"),
    "regenerate": ("run_dir", "output", "input"),
    "pipeline": ("run_dir",),
}
_PATH_LIST_KEYS = {"job": ("adopt_roots",)}


def _path_list(where: str, value: list, base_dir: str) -> list[str]:
    if not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} should be a list of paths, got {value!r}")
    return [os.path.normpath(os.path.join(base_dir, os.path.expanduser(v))) for v in value]


# sbatch options hsx sets itself: a second value would silently break the rank layout.
SBATCH_OWNED = (
    "--array",
    "-a",
    "--output",
    "-o",
    "--error",
    "-e",
    "--parsable",
    "--wrap",
    "--job-name",
    "-J",
)
# sbatch's short options that take no value: in a cluster such as -vHa0-3 the letters after
# them are options too; after any other letter the rest is that option's value.
_SBATCH_FLAGS = "HkOQsvWhV"


def sbatch_owned(arg: str) -> str | None:
    """The option of SBATCH_OWNED that sbatch would read ``arg`` as, if any: the long name or
    an abbreviation of it (getopt_long completes an unambiguous prefix; an ambiguous one is
    refused too), or a short one, alone, with its value attached, or after flags."""
    if arg.startswith("--"):
        name = arg[2:].split("=", 1)[0]
        return next((o for o in SBATCH_OWNED if name and o.startswith("--") and o[2:].startswith(name)), None)
    if arg.startswith("-"):
        for c in arg[1:]:
            if f"-{c}" in SBATCH_OWNED:
                return f"-{c}"
            if c not in _SBATCH_FLAGS:
                return None  # the rest is this option's value
    return None


def find_path(explicit: str | None = None) -> str:
    path = explicit or os.environ.get(ENV_VAR) or DEFAULT_NAME
    if not os.path.exists(path):
        raise ConfigError(f"config file {path!r} not found (use --config, {ENV_VAR}, or ./{DEFAULT_NAME})")
    return path


def _check_type(where: str, default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, list):
        ok = isinstance(value, list)
    elif isinstance(default, dict):
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    else:
        ok = True
    if not ok:
        kind = "a table of strings" if isinstance(default, dict) else type(default).__name__
        raise ConfigError(f"{where} should be {kind}, got {value!r}")
    return value


def from_dict(data: dict[str, Any], base_dir: str = ".", source: str = "<config>") -> Config:
    cfg = Config(path=source)
    for section, body in data.items():
        if section not in _PATH_KEYS and section not in ("server",):
            raise ConfigError(f"{source}: unknown section [{section}]")
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        target = getattr(cfg, section)
        known = {f.name: f for f in dataclasses.fields(target)}
        for key, value in body.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown key {key!r} in [{section}] (known: {', '.join(known)})")
            if (section, key) == ("train", "specforge"):  # SpecForge's own keys: it checks them
                if not isinstance(value, dict):
                    raise ConfigError(f"{source}: [train.specforge] must be a table")
                setattr(target, key, value)
                continue
            value = _check_type(f"{source}: [{section}] {key}", getattr(target, key), value)
            if key in _PATH_KEYS.get(section, ()) and value:
                value = os.path.expanduser(value)
                if section == "train" and key == "python" and os.sep not in value:
                    pass  # a name on PATH
                elif section in ("job", "slack", "watcher", "train", "measure", "regenerate", "pipeline"):
                    value = os.path.normpath(os.path.join(base_dir, value))
            if key in _PATH_LIST_KEYS.get(section, ()):
                value = _path_list(f"{source}: [{section}] {key}", value, base_dir)
            setattr(target, key, value)
    validate(cfg)
    return cfg


def load(path: str | None = None) -> Config:
    path = find_path(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e})") from None
    cfg = from_dict(data, base_dir=os.path.dirname(os.path.abspath(path)), source=os.path.abspath(path))
    if cfg.remote.transport == "local" and not cfg.remote.runner_config:
        cfg.remote.runner_config = cfg.path  # the GPU box is this machine: the job is this file
    return cfg


def validate(cfg: Config) -> None:
    validate_measure(cfg.measure)
    validate_regenerate(cfg.regenerate)
    validate_pipeline(cfg)
    j, s, r = cfg.job, cfg.server, cfg.remote
    if j.max_length < 2:
        raise ConfigError("[job] max_length must be at least 2")
    if j.max_row_bytes < 1:
        raise ConfigError("[job] max_row_bytes must be at least 1")
    if j.concurrency < 1:
        raise ConfigError("[job] concurrency must be at least 1")
    if j.retries < 1:
        raise ConfigError("[job] retries must be at least 1")
    if not all(isinstance(x, int) and x >= 0 for x in j.aux_layer_ids):
        raise ConfigError("[job] aux_layer_ids must be non-negative integers")
    if j.aux_layer_ids and len(j.aux_layer_ids) != 3:
        raise ConfigError("[job] aux_layer_ids must name exactly three layers (EAGLE-3)")
    if j.dtype not in FILE_DTYPES:
        raise ConfigError(f"[job] dtype must be one of {', '.join(FILE_DTYPES)}, got {j.dtype!r}")
    if not 0 <= j.mantissa_bits <= BF16_MANTISSA_BITS:
        raise ConfigError(
            f"[job] mantissa_bits must be 0..{BF16_MANTISSA_BITS} (7: exact bf16), got {j.mantissa_bits}"
        )
    if j.mantissa_bits != BF16_MANTISSA_BITS and j.dtype != "bfloat16":
        raise ConfigError(f"[job] mantissa_bits applies to bfloat16 files only ([job] dtype is {j.dtype})")
    if j.storage not in STORAGE:
        raise ConfigError(f"[job] storage must be one of {', '.join(map(repr, STORAGE))}, got {j.storage!r}")
    if s.backend not in ("reference", "sglang"):
        raise ConfigError(f"[server] backend must be 'reference' or 'sglang', got {s.backend!r}")
    if not (0 < s.port < 65536):
        raise ConfigError(f"[server] port out of range: {s.port}")
    for k, v in s.env.items():  # each goes into the server's environment and its shown command
        if not (k.isascii() and k.replace("_", "a").isalnum() and not k[0].isdigit()):
            raise ConfigError(f"[server] env: {k!r} (= {v!r}) is not a name of letters, digits and _")
    if r.transport not in ("local", "ssh"):
        raise ConfigError(f"[remote] transport must be 'local' or 'ssh', got {r.transport!r}")
    if r.transport == "ssh" and not r.host:
        raise ConfigError("[remote] host is required when transport = 'ssh'")
    validate_cluster(cfg)
    validate_train(cfg)
    if not j.tokenizer:
        j.tokenizer = j.model


def validate_cluster(cfg: Config) -> None:
    c = cfg.cluster
    if c.engine not in ("local", "slurm"):
        raise ConfigError(f"[cluster] engine must be 'local' or 'slurm', got {c.engine!r}")
    if c.ranks < 1:
        raise ConfigError("[cluster] ranks must be at least 1")
    if c.gpus_per_node < 0 or c.max_concurrent < 0 or c.max_requeues < 0:
        raise ConfigError("[cluster] gpus_per_node, max_concurrent and max_requeues must not be negative")
    if not 10 <= c.requeue_signal_s <= 65535:  # sbatch --signal's @seconds
        raise ConfigError("[cluster] requeue_signal_s must be 10..65535 seconds")
    for a in c.sbatch_args:
        if not isinstance(a, str):
            raise ConfigError(f"[cluster] sbatch_args must be strings, got {a!r}")
        owned = sbatch_owned(a)
        if owned:
            raise ConfigError(
                f"[cluster] sbatch_args: {a!r} is read by sbatch as {owned}, which is set by hsx itself; remove it"
            )


def validate_train(cfg: Config) -> None:
    t = cfg.train
    for key in ("epochs", "batch_size", "save_interval", "log_interval", "gpus", "nodes"):
        if getattr(t, key) < 1:
            raise ConfigError(f"[train] {key} must be at least 1")
    if t.max_steps < 0:
        raise ConfigError("[train] max_steps must not be negative (0: the epochs decide)")
    if t.max_checkpoints < 2:
        raise ConfigError("[train] max_checkpoints must be at least 2 (a cut-short save keeps the previous)")
    if t.learning_rate <= 0:
        raise ConfigError("[train] learning_rate must be positive")
    if t.eval_samples < 0:
        raise ConfigError("[train] eval_samples must not be negative (0: no eval)")
    if t.after_extraction and not t.python:
        raise ConfigError("[train] after_extraction needs [train] python (hsx-runner train setup builds one)")
    if t.nodes > 1 and cfg.cluster.engine != "slurm":
        raise ConfigError(
            '[train] nodes > 1 needs [cluster] engine = "slurm" (one box trains on its own gpus)'
        )


def require_job(cfg: Config) -> None:
    """The keys a runner needs; the ops side may load a config without them."""
    missing = [k for k in ("model", "dataset", "out") if not getattr(cfg.job, k)]
    if missing:
        raise ConfigError(f"{cfg.path}: [job] needs {', '.join(missing)}")
