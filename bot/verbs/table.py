"""The kinds table: each job kind (the extraction, the training, the draft's measurement, the
regeneration of the data, and the pipeline that runs them as one) as data: its slash command, its
word, and its verbs with who may run them, their flags and the question a confirmed one asks.

It drives the chat parser and its help (commands.py), the dispatch (handlers.py), the `hsx`
subcommands (cli.py), the buttons (slack_out.py), and each slash command's entry of
deploy/slack-manifest.yaml (``Kind.manifest_entry``; a test compares). A third kind is a row here
(``KINDS``), its verbs' handlers (a module like train.py, named in handlers.RUN), and its watcher
judge; nothing else routes by kind.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from runner.contract.replies import MAX_LOG_LINES

SLASH = "/extract"
SLASH_DESCRIPTION = "Start, resume, stop or query the extraction"
DEFAULT_LOG_LINES = 20


@dataclass(frozen=True)
class Flag:
    """A flag, or an argument named by its placeholder (N, DIR)."""

    name: str
    kind: str = "switch"  # switch | choice (one of a group sharing dest) | count (N) | path (DIR)
    help: str = ""  # the terminal's --help line
    dest: str = ""  # the Command field it sets; a switch's own name by default
    audited: bool = False  # the audit entry names it
    operator: bool = False  # setting it needs an operator

    @property
    def field(self) -> str:
        return self.dest or self.name.lstrip("-")


@dataclass(frozen=True)
class Verb:
    name: str
    help: str  # what it does, for both help texts
    flags: tuple[Flag, ...] = ()
    operator: bool = False  # only operators may run it; a refusal is audited, and every mutating run
    every_s: float = 0.0  # an expensive read: at most once this often per person (operators: no limit)
    confirm: str = ""  # chat asks first, with a button of this label; a terminal does not ask
    terminal: bool = True  # `hsx VERB` exists
    json: bool = True  # `hsx VERB --json` prints the runner's reply as it is
    report: bool = False  # with --json, the reply's complete/ok is the exit status
    aside: str = ""  # after the usage in chat help
    slash: str = SLASH  # the slash command it belongs to
    question: str = ""  # what a verb with a confirmation asks first (free-gpus builds its own)

    @property
    def usage(self) -> str:
        """The flags as help shows them: ` [N] [--runner|--server|--crash]`."""
        parts: list[str] = []
        for f in self.flags:
            if f.kind == "choice":
                group = "[" + "|".join(g.name for g in self.flags if g.dest == f.dest) + "]"
                parts += [] if group in parts else [group]
            else:
                parts.append(f.name if f.kind == "path" else f"[{f.name}]")
        return "".join(" " + p for p in parts)

    @property
    def for_operators(self) -> bool:
        """Operators only, for all of it or for a flag (verify --repair)."""
        return self.operator or any(f.operator for f in self.flags)

    def chat_help(self) -> str:
        aside = f" {self.aside}" if self.aside else ""
        line = f"`{self.slash} {self.name}{self.usage}`{aside} — {self.help}"
        line += ", asks to confirm" if self.confirm else ""
        return line + (" (operators)" if self.for_operators else "")


VERBS = (
    Verb(
        "status",
        "where the extraction is, rate, ETA, disk; --detail adds tokens/s, latency and what is in flight",
        (Flag("--detail", help="tokens/s, latency, what is in flight"),),
        aside='(or just "progress?")',
    ),
    Verb(
        "start",
        "start the job on the GPU box after preflight; --force skips its gates",
        (Flag("--force", help="past preflight's gates (audited)", audited=True),),
        operator=True,
    ),
    Verb(
        "resume",
        "continue after a crash or stop; finished samples are kept",
        (Flag("--force", help="past preflight's gates (audited)", audited=True),),
        operator=True,
    ),
    Verb(
        "preflight",
        "what would stop a start: model, dataset, disk, GPUs held, the patch",
        report=True,
        every_s=120.0,  # it starts the server's interpreter on the box
    ),
    Verb(
        "free-gpus",
        "stop and disable the systemd units holding GPUs",
        operator=True,
        confirm="Stop and disable",
        terminal=False,
        json=False,
    ),
    Verb(
        "stop",
        "stop the job",
        operator=True,
        confirm="Stop the job",
        question="Stop the extraction? Finished samples are kept; `/extract resume` continues.",
    ),
    Verb(
        "verify",
        "check every sample; --repair re-queues bad ones",
        (Flag("--quick"), Flag("--repair", audited=True, operator=True)),
        report=True,
        every_s=600.0,  # reads every sample of the output
    ),
    Verb(
        "adopt",
        "take over samples another tool wrote in DIR (an absolute path on the GPU box); "
        "bad files are quarantined in out, or left in place in a foreign tree",
        (
            Flag(
                "DIR",
                "path",
                "the directory on the GPU box with another tool's samples",
                dest="path",
                audited=True,
            ),
        ),
        operator=True,
        report=True,
    ),
    Verb(
        "compact",
        "re-encode the finished samples in place to the job's [job] storage (and fewer mantissa_bits "
        "when it asks): room made on the disk without extracting again; beside a running job too",
        operator=True,
        report=True,
    ),
    Verb(
        "logs",
        "last N lines of each log, or of the one named "
        f"(default {DEFAULT_LOG_LINES}, at most {MAX_LOG_LINES})",
        (
            Flag("N", "count", f"lines, 1..{MAX_LOG_LINES}", dest="n"),
            Flag("--runner", "choice", dest="which"),
            Flag("--server", "choice", dest="which"),
            Flag("--crash", "choice", dest="which"),
        ),
        operator=True,  # paths, host names and the server's whole command line
    ),
    Verb(
        "chart",
        "samples done over time: the total, the rate, the projected finish, each crash, stall, pause and resume",
        terminal=False,
        json=False,
        every_s=30.0,  # the history from the box, and a drawing
    ),
    Verb("help", "this text", terminal=False, json=False),
)
# `/train VERB` and `hsx train VERB`: each runs `hsx-runner train VERB` (bot/verbs/train.py); chart draws
# `train history`.
TRAIN_SLASH = "/train"
TRAIN_DESCRIPTION = "Train, resume, stop, query, chart or export the EAGLE-3 draft"


def _on(slash: str):
    """``slash``'s verbs: ``verb(name, help, operator=False, **more)``."""

    def verb(name: str, help_: str, operator: bool = False, **kw) -> Verb:
        return Verb(name, help_, operator=operator, slash=slash, **kw)

    return verb


_train = _on(TRAIN_SLASH)


TRAIN_VERBS = (
    _train(
        "status",
        "where the training is: step, loss, acc, rate, ETA, the last checkpoint",
        every_s=30.0,  # the box sizes the run dir; "progress?" says it too
    ),
    _train("start", "start SpecForge's trainer on the output (refused where checkpoints exist)", True),
    _train("resume", "continue from the last complete checkpoint, with the first launch's YAML", True),
    _train(
        "after-extraction",
        "start the training by itself when the running extraction ends done (a `start` during it offers this)",
        True,
        confirm="Start it then",
        question="Start the training by itself when the extraction ends done and its features verify?",
    ),
    _train(
        "stop",
        "stop the trainer (the last complete checkpoint stays)",
        True,
        confirm="Stop the training",
        question="Stop the training? The last durable checkpoint stays; `/train resume` continues from it "
        "(the steps since are lost).",
    ),
    _train("export", "export the draft for SGLang, with the flags to serve it", True),
    _train(
        "chart",
        "loss and acc over the steps, the evals and their simulated accept length, each crash, stop and resume",
        terminal=False,
        json=False,
        every_s=30.0,  # the whole history from the box, and a drawing
    ),
    _train("help", "this text", terminal=False, json=False),
)


def _supervised(slash: str, noun: str, kept: str, status: str, start: str, chart: str) -> tuple[Verb, ...]:
    """A supervised kind's verbs in its own words: ``noun`` (the measurement), ``kept`` (what a
    stop keeps: finished requests)."""
    return (
        Verb("status", status, slash=slash, every_s=30.0),  # a read of the box's files
        Verb("start", start, slash=slash, operator=True),
        Verb("resume", f"continue after a crash or stop; {kept} are kept", slash=slash, operator=True),
        Verb(
            "stop",
            f"stop the {noun} ({kept} are kept)",
            slash=slash,
            operator=True,
            confirm=f"Stop the {noun}",
            question=f"Stop the {noun}? {kept[0].upper() + kept[1:]} are kept; `{slash} resume` continues.",
        ),
        # the history from the box, and a drawing
        Verb("chart", chart, slash=slash, terminal=False, json=False, every_s=30.0),
        Verb("help", "this text", slash=slash, terminal=False, json=False),
    )


# `/measure VERB` and `hsx measure VERB`: each runs `hsx-runner measure VERB` (bot/verbs/measure.py).
MEASURE_SLASH = "/measure"
MEASURE_DESCRIPTION = "Start, resume, stop or query the measurement of the draft in SGLang"


MEASURE_VERBS = _supervised(
    MEASURE_SLASH,
    "measurement",
    "finished requests",
    "where the measurement is: the server loading, requests done, the measured accept length beside "
    "the simulated one, tokens/s with and without the draft, whether the outputs are equal",
    "serve the exported draft in SGLang and measure it against the target alone",
    "accept length per setting beside the simulated one, the accept histograms, tokens/s with and without the draft",
)  # status: the box reads the results file


# `/regenerate VERB` and `hsx regenerate VERB`: each runs `hsx-runner regenerate VERB`
# (bot/verbs/regenerate.py); chart draws the progress points its status carries.
REGENERATE_SLASH = "/regenerate"
REGENERATE_DESCRIPTION = "Start, resume, stop or query the regeneration of the data by the target"


REGENERATE_VERBS = _supervised(
    REGENERATE_SLASH,
    "regeneration",
    "committed rows",
    "where the regeneration is: rows done / total, rows not regenerated, tokens/s, ETA, the server "
    "loading, restarts, disk",
    "write the dataset's answers again with the target ([regenerate])",
    "rows done and tokens/s over time",
)  # status: the box reads the run's history


# `/pipeline VERB` and `hsx pipeline VERB`: each runs `hsx-runner pipeline VERB`
# (bot/verbs/pipeline.py); start again resumes where it stopped, so it has no resume verb.
PIPELINE_SLASH = "/pipeline"
PIPELINE_DESCRIPTION = "Start, stop or query the stages run as one (regenerate, extract, train, measure)"


_pipeline = _on(PIPELINE_SLASH)


PIPELINE_VERBS = (
    _pipeline(
        "status",
        "where the pipeline is: stage k of n, each stage's phase, the stage under way in its own words",
        every_s=30.0,  # the box asks every stage for its status
    ),
    _pipeline(
        "start",
        "run the [pipeline] stages in order; after a failure, crash or stop it resumes where it stopped",
        True,
    ),
    _pipeline(
        "stop",
        "stop the pipeline and the stage under way (finished work is kept)",
        True,
        confirm="Stop the pipeline",
        question=(
            "Stop the pipeline? The stage under way stops too; finished work is kept; "
            "`/pipeline start` resumes."
        ),
    ),
    _pipeline("help", "this text", terminal=False, json=False),
)


@dataclass(frozen=True)
class Kind:
    """A job kind: what chat, the terminal, the buttons and the manifest know of it."""

    name: str  # the extraction, the training: also its key in KINDS and in a Command
    slash: str
    description: str  # the manifest's
    verbs: tuple[Verb, ...]
    word: str = ""  # before its verbs in `hsx WORD VERB`, audit lines, confirmations ("train stop")
    key: str = ""  # the start of its alerts' keys: a Resume button's value says which kind it resumes
    resume: str = "resume"  # the verb its alerts' Resume button runs
    stage: str = ""  # its name as a pipeline's stage (runner.contract.pipeline.STAGES); "": none

    @functools.cached_property  # a frozen row: its verbs by name, built once
    def table(self) -> dict[str, Verb]:
        return {v.name: v for v in self.verbs}

    def action(self, verb: str) -> str:
        """A verb as the audit log, a confirmation and a reply name it: `stop`, `train stop`."""
        return f"{self.word} {verb}" if self.word else verb

    def help(self) -> str:
        return "\n".join(v.chat_help() for v in self.verbs)

    def usage_hint(self) -> str:
        return " | ".join(v.name + v.usage for v in self.verbs)

    def manifest_entry(self) -> str:
        """Its slash command's lines of deploy/slack-manifest.yaml."""
        return (
            f"    - command: {self.slash}\n"
            f"      description: {self.description}\n"
            f"      usage_hint: {json.dumps(self.usage_hint())}\n"  # a JSON string is a YAML string
        )


EXTRACTION = Kind("extraction", SLASH, SLASH_DESCRIPTION, VERBS, stage="extract")
TRAINING = Kind(
    "training", TRAIN_SLASH, TRAIN_DESCRIPTION, TRAIN_VERBS, word="train", key="train:", stage="train"
)
MEASURING = Kind(
    "measurement",
    MEASURE_SLASH,
    MEASURE_DESCRIPTION,
    MEASURE_VERBS,
    word="measure",
    key="measure:",
    stage="measure",
)
REGENERATING = Kind(
    "regeneration",
    REGENERATE_SLASH,
    REGENERATE_DESCRIPTION,
    REGENERATE_VERBS,
    word="regenerate",
    key="regenerate:",
    stage="regenerate",
)
PIPELINE = Kind(
    "pipeline",
    PIPELINE_SLASH,
    PIPELINE_DESCRIPTION,
    PIPELINE_VERBS,
    word="pipeline",
    key="pipeline:",
    resume="start",  # start resumes a pipeline that failed, crashed or was stopped
)
KINDS = {k.name: k for k in (EXTRACTION, TRAINING, MEASURING, REGENERATING, PIPELINE)}


def kind_of_key(key: str) -> Kind:
    """The kind an alert's key (a Resume button's value) belongs to; the extraction's have no mark."""
    return next((k for k in KINDS.values() if k.key and key.startswith(k.key)), EXTRACTION)


def kind_of_text(text: str) -> Kind:
    """The kind a line typed in a console names by its slash command; the extraction's by default."""
    words = text.lower().split()
    return next((k for k in KINDS.values() if words and words[0] == k.slash), EXTRACTION)
