"""One parser for every chat surface (Slack, the terminal console) and every kind of job.

Input becomes a fixed ``Command`` of a kind (``table.KINDS``) or a help reply; nothing a user
types ever reaches a shell. The verbs, their flags and who may run them come from the kind's
table; handlers.py runs a Command and answers with a ``Reply``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bot.render import summary
from bot.verbs import confirm
from bot.verbs.table import DEFAULT_LOG_LINES, EXTRACTION, KINDS, Kind, Verb
from runner.contract.replies import MAX_LOG_LINES, Answer

MAX_INPUT_CHARS = 200
_WORD_RE = re.compile(r"^[a-z0-9-]{1,24}$")
# adopt's DIR: an absolute path on the GPU box, kept as typed (case matters), one argv element
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@=,:~-]{0,180}$")
_QUESTION_RE = re.compile(r"^(progress|status)\s*\?*$")
_MENTION_RE = re.compile(r"^<@[A-Z0-9]+>\s*")
_CONFIRM_WORDS = ("--yes", "confirm")

HELP = EXTRACTION.help()


@dataclass(frozen=True)
class Command:
    verb: str
    kind: str = EXTRACTION.name  # its row of table.KINDS
    n: int = DEFAULT_LOG_LINES  # logs
    which: str = "all"  # logs: runner, server, crash or all
    repair: bool = False  # verify
    quick: bool = False  # verify
    confirmed: bool = False  # stop, free-gpus
    force: bool = False  # start, resume: past preflight's gates
    detail: bool = False  # status: throughput and latency too
    wait: bool = False  # verify, adopt, compact: in the foreground (a terminal); chat: in the background
    path: str = ""  # adopt: the directory, as typed
    units: tuple[str, ...] = ()  # free-gpus, confirmed: the units the question named
    until: int | None = None  # free-gpus, confirmed: when that confirmation expires (epoch s)
    problem: str = ""  # why the input was not understood; the reply is help

    @property
    def row(self) -> Verb | None:
        return KINDS[self.kind].table.get(self.verb)

    @property
    def mutating(self) -> bool:
        """Operators only: the verb itself, or a flag set on it (verify --repair)."""
        v = self.row
        return v is not None and (v.operator or any(f.operator and getattr(self, f.field) for f in v.flags))

    @property
    def name(self) -> str:
        """The verb as a reply and a confirmation name it: `stop`, `train stop`."""
        return KINDS[self.kind].action(self.verb)

    @property
    def action(self) -> str:
        """The action as the audit log names it: the verb of its kind and its audited flags."""
        v = self.row
        words = [self.name]
        for f in v.flags if v else ():
            value = getattr(self, f.field)
            if f.audited and value:
                words.append(f.name if f.kind == "switch" else str(value))
        return " ".join(words)


@dataclass
class Reply:
    text: str
    blocks: list[dict] | None = None
    ephemeral: bool = False  # only the asker sees it (errors, refusals, help)
    audit: str | None = None  # audit line for the channel, after a mutating action
    confirm: str | None = None  # the verb that waits for a confirmation, as Command.name says it
    confirm_value: str = ""  # what the confirmation carries back (confirmed_command), if not the verb
    image: bytes | None = None  # PNG for `chart`
    image_name: str = "hsx-chart.png"
    error: bool = False
    markup: bool = False  # text is mrkdwn hsx wrote itself (mentions), sent to Slack unescaped
    extra: dict = field(default_factory=dict)
    public: str = ""  # what the channel reads where text has the box's paths: text then to the asker alone


def _help(problem: str, kind: Kind = EXTRACTION) -> Command:
    return Command("help", kind=kind.name, problem=problem)


def control_chars(text: str) -> bool:
    return any((ord(c) < 32 and c not in " \t") or ord(c) == 127 for c in text)


def parse(text: object, kind: Kind = EXTRACTION) -> Command:
    """Turn chat text into a fixed Command of ``kind``; anything else is help with the reason."""
    if not isinstance(text, str):
        return _help("input is not text", kind)
    if len(text) > MAX_INPUT_CHARS:
        return _help(f"input refused: {len(text):,} characters; commands are a few words", kind)
    if control_chars(text):
        return _help("input refused: it contains newlines or control characters", kind)
    raw = _MENTION_RE.sub("", text.strip()).strip()
    s = raw.lower()
    if _QUESTION_RE.match(s):
        return Command("status", kind=kind.name)
    if s.startswith(kind.slash):
        s, raw = s[len(kind.slash) :], raw[len(kind.slash) :]
        if s and not s[0].isspace():
            return _help("unknown command", kind)
    words = s.split()
    if not words:
        return Command("help", kind=kind.name)
    verb = kind.table.get(words[0])
    if verb is not None and any(f.kind == "path" for f in verb.flags):
        return _parse_path(
            verb, raw.split()[1:], kind
        )  # before the plain-word rule: DIR keeps its case and '/'
    if not all(_WORD_RE.match(w) for w in words):
        return _help("input refused: only plain words are accepted (letters, digits, '-')", kind)
    if verb is None:
        return _help(f"unknown command `{words[0]}`", kind)
    if any(f.kind == "count" for f in verb.flags):
        return _parse_count(verb, words[1:], kind)
    return _parse_switches(verb, words[1:], kind)


def _parse_switches(verb: Verb, args: list[str], kind: Kind) -> Command:
    switches = {f.name: f.field for f in verb.flags if f.kind == "switch"}
    confirms = _CONFIRM_WORDS if verb.confirm else ()
    bad = [a for a in args if a not in switches and a not in confirms]
    if bad:
        names = list(switches)
        if not names:
            asks = " (it asks to confirm)" if verb.confirm else ""
            return _help(f"`{verb.name}` takes no arguments{asks}", kind)
        if len(names) == 1:
            return _help(f"`{verb.name}` takes only {names[0]}", kind)
        return _help(f"`{verb.name}` takes {' and '.join(names)}, not `{bad[0]}`", kind)
    fields: dict = {switches[a]: True for a in args if a in switches}
    if verb.confirm:
        fields["confirmed"] = any(a in confirms for a in args)
    return Command(verb.name, kind=kind.name, **fields)


def _parse_path(verb: Verb, args: list[str], kind: Kind) -> Command:
    """A verb with DIR takes DIR alone."""
    (path,) = (f for f in verb.flags if f.kind == "path")
    if len(args) != 1:
        return _help(f"`{verb.name}` takes one directory: `{kind.slash} {verb.name} /data/old-output`", kind)
    if not _PATH_RE.match(args[0]) or "/../" in args[0] + "/":
        return _help(
            f"`{verb.name}` needs an absolute path on the GPU box, of letters, digits and . _ - / + @ = , : ~",
            kind,
        )
    return Command(verb.name, kind=kind.name, **{path.field: args[0]})


def _parse_count(verb: Verb, args: list[str], kind: Kind) -> Command:
    """`logs [N | -n N] [--runner|--server|--crash]`: a short tail of each log unless one is named."""
    (count,) = (f for f in verb.flags if f.kind == "count")
    choices = {f.name: (f.field, f.name[2:]) for f in verb.flags if f.kind == "choice"}
    flags = [a for a in args if a.startswith("--")]
    if len(flags) > 1 or any(f not in choices for f in flags):
        return _help(f"`{verb.name}` takes one of {', '.join(choices)} and a number of {count.help}", kind)
    fields = {}
    if flags:
        key, value = choices[flags[0]]
        fields[key] = value
    args = [a for a in args if not a.startswith("--")]
    if args and args[0] == "-" + count.field:
        args = args[1:]
    if not args:
        return Command(verb.name, kind=kind.name, **fields)
    if len(args) == 1 and args[0].isdigit():
        return command_of(kind, verb.name, **fields, **{count.field: int(args[0])})
    return _help(f"`{verb.name}` takes a number of {count.help}", kind)


def command_of(kind: Kind, verb: str, **fields) -> Command:
    """A Command from arguments already split (the terminal's, or chat's); a count out of range is help."""
    for f in kind.table[verb].flags:
        if f.kind == "count" and not 1 <= fields.get(f.field, DEFAULT_LOG_LINES) <= MAX_LOG_LINES:
            return _help(f"`{verb}` takes a number of {f.help}", kind)
    return Command(verb, kind=kind.name, **fields)


def help_reply(problem: str = "", kind: Kind = EXTRACTION) -> Reply:
    text = (f"{problem}\n\n" if problem else "") + kind.help()
    return Reply(text=text, ephemeral=True, error=bool(problem))


def confirmed_command(value: object) -> Command | None:
    """The command a confirmation runs (a button's value, the console's yes): a confirmed verb of
    a kind as ``Command.name`` says it (`stop`, `train stop`); free-gpus bound to its question
    (bot/verbs/confirm.py). None: not one hsx asked for."""
    if (b := confirm.bound(value)) is not None:
        return Command("free-gpus", confirmed=True, units=b[0], until=b[1])
    for kind in KINDS.values():
        for row in kind.verbs:
            if row.confirm and kind.action(row.name) == value:
                return Command(row.name, kind=kind.name, confirmed=True)
    return None


def answer_text(cmd: Command, answer: Answer) -> str:
    """What the box answered an action, in its words."""
    if not answer.ok:
        return f"`{cmd.name}` refused: {answer.message or 'no reason given'}"
    return f"`{cmd.name}`: {answer.message or 'done'}"


def failed(e: Exception) -> Reply:
    """The box could not answer: what went wrong, to the asker only."""
    return Reply(text=summary.render_error(e), ephemeral=True, error=True)
