"""The config sections of the pipeline's stages after the extraction: the training ([train]),
the draft's measurement ([measure]) and the regeneration of the data ([regenerate]). Loaded and
checked by ``config`` with every other section."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError

AUTO_PYTHON = "auto"  # [train] python: the venv hsx builds for the box (runner/train/interpreter.py)


@dataclass
class TrainConfig:
    """SpecForge's trainer on the job's output (runner/train). Off until ``python`` is set."""

    python: str = ""  # an interpreter whose specforge is the 0.2.0 unified runtime; "auto": hsx builds one
    envs_dir: str = (
        ""  # where python = "auto" builds its venv (several GB on a GPU box); default ~/.cache/hsx
    )
    run_dir: str = ""  # default: <out>-train (outside out: SpecForge trains on every .ckpt under it)
    export_dir: str = ""  # default: <run_dir>/export
    epochs: int = 1
    max_steps: int = 0  # 0: the epochs decide
    batch_size: int = 1
    learning_rate: float = 1e-4
    save_interval: int = 200  # > 0: SpecForge's default 0 saves only at the end
    max_checkpoints: int = 2  # >= 2: a save cut short leaves the previous one
    log_interval: int = 10
    seed: int = 0  # SpecForge's, and the held-out split's
    eval_samples: int = (
        0  # held out of training for SpecForge's eval (val acc, simulated accept length); 0: none
    )
    after_extraction: bool = False  # the extraction's end, done and verified, starts the training
    export_at_end: bool = True  # the end exports the draft for SGLang (false: only `train export` does)
    measure_at_end: bool = False  # the end, exported, measures the draft in SGLang ([measure]; one box)
    gpus: int = 1  # trainer processes per node: SpecForge's deployment.trainer.nproc_per_node
    nodes: int = 1  # > 1: one Slurm job of nodes x gpus ([cluster] engine = "slurm")
    specforge: dict = field(default_factory=dict)  # [train.specforge]: run.yaml keys, merged last


@dataclass
class MeasureConfig:
    """The draft measured where it serves (runner/measure): the target alone, then with the
    draft at each setting, each a fresh SGLang server, on the same prompts."""

    draft: str = ""  # the exported draft; default: [train]'s export dir
    run_dir: str = ""  # default: <out>-measure
    prompts: str = (
        ""  # a JSONL of conversations; default: the training's held-out rows, else the dataset's first
    )
    samples: int = 16  # prompts: the first user turns of the first N rows that have one
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0: greedy, and the outputs with the draft must equal the target's
    settings: list = field(default_factory=lambda: ["5/4/8", "3/1/4"])  # STEPS/TOPK/DRAFT_TOKENS
    # the target's name in the published figures hsx ships ("Kimi-K2-Instruct"): its published
    # accept lengths at these settings are said beside the measured ones; "": none
    reference: str = ""


@dataclass
class RegenerateConfig:
    """The dataset's assistant turns written again by the target (runner/regenerate), served as
    [server] says; sampling as SGLang's /generate takes it."""

    run_dir: str = ""  # default: <out>-regenerate
    output: str = ""  # the new dataset; default: beside [job] dataset, NAME.regenerated.jsonl
    max_new_tokens: int = 512  # per assistant turn
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int = 0  # a row's seed is this plus its index, where sampling uses one
    reasoning: str = (
        "keep"  # the thinking text: keep, drop (cut out), or disable (the template's enable_thinking)
    )
    concurrency: int = 8  # rows in flight
    input: str = ""  # the dataset to regenerate; default: [job] dataset


@dataclass
class PipelineConfig:
    """The stages run as one (runner/pipeline): each hands off to the next when it ends done."""

    stages: list = field(default_factory=list)  # a run of regenerate, extract, train, measure; empty: none
    run_dir: str = ""  # default: <out>-pipeline
    max_resumes: int = 3  # a stage that crashes is resumed by the pipeline this often per start; 0: never


def validate_measure(m: MeasureConfig) -> None:
    from .measure import parse_setting

    if m.samples < 1 or m.max_new_tokens < 1 or m.temperature < 0:
        raise ConfigError("[measure] samples and max_new_tokens must be at least 1, temperature at least 0")
    if not m.settings or not all(isinstance(x, str) for x in m.settings):
        raise ConfigError('[measure] settings must be a non-empty list of "STEPS/TOPK/DRAFT_TOKENS" strings')
    for x in m.settings:
        try:
            parse_setting(x)
        except ValueError as e:
            raise ConfigError(f"[measure] settings: {e}") from None
    if len(set(m.settings)) != len(m.settings):
        raise ConfigError("[measure] settings: each setting once")


def validate_regenerate(r: RegenerateConfig) -> None:
    from .regenerate import REASONING

    if r.max_new_tokens < 1 or r.concurrency < 1:
        raise ConfigError("[regenerate] max_new_tokens and concurrency must be at least 1")
    if r.temperature < 0 or not 0 < r.top_p <= 1 or r.top_k < 0:
        raise ConfigError("[regenerate] temperature must be at least 0, top_p in (0, 1], top_k at least 0")
    if r.reasoning not in REASONING:
        raise ConfigError(
            f"[regenerate] reasoning must be one of {', '.join(REASONING)}, got {r.reasoning!r}"
        )


def validate_pipeline(cfg) -> None:
    """The stages checked; a pipeline that regenerates and then extracts extracts the regenerated
    dataset: ``[job] dataset`` becomes ``[regenerate]``'s output, the input ``[regenerate] input``."""
    from .pipeline import check_stages

    p, r, j = cfg.pipeline, cfg.regenerate, cfg.job
    if p.max_resumes < 0:
        raise ConfigError("[pipeline] max_resumes must be 0 or more")
    if not p.stages:
        return
    if why := check_stages(p.stages):
        raise ConfigError(f"[pipeline] {why}")
    if "train" in p.stages and not cfg.train.python:
        raise ConfigError(
            '[pipeline] stages train: set [train] python (an interpreter with SpecForge, or "auto")'
        )
    if "regenerate" in p.stages and "extract" in p.stages:
        r.input = r.input or j.dataset
        r.output = r.output or regenerated_path(r.input)
        j.dataset = r.output


def regenerated_path(source: str) -> str:
    """The regenerated dataset's default name: beside its source, NAME.regenerated.jsonl."""
    return source.removesuffix(".jsonl") + ".regenerated.jsonl"
