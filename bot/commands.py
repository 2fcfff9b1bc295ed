"""One parser and one set of handlers for every chat surface (Slack, the terminal console).

Input becomes a fixed ``Command`` or a help reply; nothing a user types ever reaches a shell.
The verbs, their flags and who may run them come from the table in ``verbs``.
Handlers call the GPU box through ``remote.client.GpuBox`` and answer with the records' plain
text (``runner.text.extraction``; Block Kit from ``summary``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remote.errors import RemoteError
from remote.live import LiveStatus
from runner.contract.config import Config
from runner.contract.replies import (
    MAX_LOG_LINES,
    AdoptReport,
    Answer,
    Check,
    CompactReport,
    PreflightReport,
    VerifyReport,
)
from runner.contract.train import TrainRecord
from runner.text import extraction
from runner.text.human import human_duration

from . import confirm, summary
from .access import Allowance
from .audit import AuditLog, mention
from .verbs import CONFIRMED, DEFAULT_LOG_LINES, SLASH, TABLE, Verb, help_text

MAX_INPUT_CHARS = 200
_WORD_RE = re.compile(r"^[a-z0-9-]{1,24}$")
# adopt's DIR: an absolute path on the GPU box, kept as typed (case matters), one argv element
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@=,:~-]{0,180}$")
_QUESTION_RE = re.compile(r"^(progress|status)\s*\?*$")
_MENTION_RE = re.compile(r"^<@[A-Z0-9]+>\s*")
_CONFIRM_WORDS = ("--yes", "confirm")

HELP = help_text()


@dataclass(frozen=True)
class Command:
    verb: str
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
    def mutating(self) -> bool:
        """Operators only: the verb itself, or a flag set on it (verify --repair)."""
        v = TABLE.get(self.verb)
        return v is not None and (v.operator or any(f.operator and getattr(self, f.field) for f in v.flags))

    @property
    def action(self) -> str:
        """The action as the audit log names it: the verb and its audited flags."""
        v = TABLE.get(self.verb)
        words = [self.verb]
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
    confirm: str | None = None  # the verb that waits for a confirmation (stop)
    confirm_value: str = ""  # what the confirmation carries back (confirmed_command), if not the verb
    image: bytes | None = None  # PNG for `chart`
    image_name: str = "hsx-chart.png"
    error: bool = False
    markup: bool = False  # text is mrkdwn hsx wrote itself (mentions), sent to Slack unescaped
    extra: dict = field(default_factory=dict)


def _help(problem: str) -> Command:
    return Command("help", problem=problem)


def parse(text: object) -> Command:
    """Turn chat text into a fixed Command; anything else is help with the reason."""
    if not isinstance(text, str):
        return _help("input is not text")
    if len(text) > MAX_INPUT_CHARS:
        return _help(f"input refused: {len(text):,} characters; commands are a few words")
    if any(ord(c) < 32 and c not in " \t" or ord(c) == 127 for c in text):
        return _help("input refused: it contains newlines or control characters")
    raw = _MENTION_RE.sub("", text.strip()).strip()
    s = raw.lower()
    if _QUESTION_RE.match(s):
        return Command("status")
    if s.startswith(SLASH):
        s, raw = s[len(SLASH) :], raw[len(SLASH) :]
        if s and not s[0].isspace():
            return _help("unknown command")
    words = s.split()
    if not words:
        return Command("help")
    verb = TABLE.get(words[0])
    if verb is not None and any(f.kind == "path" for f in verb.flags):
        return _parse_path(verb, raw.split()[1:])  # before the plain-word rule: DIR keeps its case and '/'
    if not all(_WORD_RE.match(w) for w in words):
        return _help("input refused: only plain words are accepted (letters, digits, '-')")
    if verb is None:
        return _help(f"unknown command `{words[0]}`")
    if any(f.kind == "count" for f in verb.flags):
        return _parse_count(verb, words[1:])
    return _parse_switches(verb, words[1:])


def _parse_switches(verb: Verb, args: list[str]) -> Command:
    switches = {f.name: f.field for f in verb.flags if f.kind == "switch"}
    confirms = _CONFIRM_WORDS if verb.confirm else ()
    bad = [a for a in args if a not in switches and a not in confirms]
    if bad:
        names = list(switches)
        if not names:
            asks = " (it asks to confirm)" if verb.confirm else ""
            return _help(f"`{verb.name}` takes no arguments{asks}")
        if len(names) == 1:
            return _help(f"`{verb.name}` takes only {names[0]}")
        return _help(f"`{verb.name}` takes {' and '.join(names)}, not `{bad[0]}`")
    fields: dict = {switches[a]: True for a in args if a in switches}
    if verb.confirm:
        fields["confirmed"] = any(a in confirms for a in args)
    return Command(verb.name, **fields)


def _parse_path(verb: Verb, args: list[str]) -> Command:
    """A verb with DIR takes DIR alone."""
    (path,) = (f for f in verb.flags if f.kind == "path")
    if len(args) != 1:
        return _help(f"`{verb.name}` takes one directory: `{SLASH} {verb.name} /data/old-output`")
    if not _PATH_RE.match(args[0]) or "/../" in args[0] + "/":
        return _help(
            f"`{verb.name}` needs an absolute path on the GPU box, of letters, digits and . _ - / + @ = , : ~"
        )
    return Command(verb.name, **{path.field: args[0]})


def _parse_count(verb: Verb, args: list[str]) -> Command:
    """`logs [N | -n N] [--runner|--server|--crash]`: a short tail of each log unless one is named."""
    (count,) = (f for f in verb.flags if f.kind == "count")
    choices = {f.name: (f.field, f.name[2:]) for f in verb.flags if f.kind == "choice"}
    flags = [a for a in args if a.startswith("--")]
    if len(flags) > 1 or any(f not in choices for f in flags):
        return _help(f"`{verb.name}` takes one of {', '.join(choices)} and a number of {count.help}")
    fields = {}
    if flags:
        key, value = choices[flags[0]]
        fields[key] = value
    args = [a for a in args if not a.startswith("--")]
    if args and args[0] == "-" + count.field:
        args = args[1:]
    if not args:
        return Command(verb.name, **fields)
    if len(args) == 1 and args[0].isdigit():
        return command_of(verb.name, **fields, **{count.field: int(args[0])})
    return _help(f"`{verb.name}` takes a number of {count.help}")


def command_of(verb: str, **fields) -> Command:
    """A Command from arguments already split (the terminal's, or chat's); a count out of range is help."""
    for f in TABLE[verb].flags:
        if f.kind == "count" and not 1 <= fields.get(f.field, DEFAULT_LOG_LINES) <= MAX_LOG_LINES:
            return _help(f"`{verb}` takes a number of {f.help}")
    return Command(verb, **fields)


def help_reply(problem: str = "") -> Reply:
    text = (f"{problem}\n\n" if problem else "") + HELP
    return Reply(text=text, ephemeral=True, error=bool(problem))


class Handlers:
    """Runs parsed commands against one GPU box. Shared by Slack and the console."""

    def __init__(
        self,
        box,
        cfg: Config,
        audit: AuditLog,
        history: Callable[[], list[dict]] | None = None,
        in_group: Callable[[str], bool] | None = None,
        live: LiveStatus | None = None,
        train_live: LiveStatus | None = None,
    ):
        self.box = box
        self.live = live if live is not None else LiveStatus(box)  # status within a bound
        self.train_live = train_live or LiveStatus(
            box, read=lambda: box.train_status(), parse=TrainRecord.from_dict
        )
        self.cfg = cfg
        self.audit = audit
        self.history = history
        self.in_group = in_group  # operator user-group membership, when Slack can tell
        self.allowance = Allowance()  # expensive reads, per person

    def is_operator(self, user: str) -> bool:
        if user in self.cfg.slack.operators:
            return True
        if self.cfg.slack.operator_group and self.in_group is not None:
            try:
                return bool(self.in_group(user))
            except Exception:  # a Slack lookup failure must not grant rights
                return False
        return False

    def handle(self, cmd: Command, user: str, operator: bool | None = None) -> Reply:
        if cmd.verb == "help":
            return help_reply(cmd.problem)
        if cmd.mutating:
            allowed = self.is_operator(user) if operator is None else operator
            if not allowed:
                line = self.audit.record(user, cmd.action, "refused: not an operator")
                return Reply(
                    text=f"refused: only operators may `{cmd.action}`; ask one of "
                    f"{', '.join(mention(u) for u in self.cfg.slack.operators) or 'the operators'}\n{line}",
                    ephemeral=True,
                    error=True,
                    audit=line,
                    markup=True,  # the action (parsed words) and configured operators only
                )
        if cmd.verb == "stop" and not cmd.confirmed:
            return Reply(
                text="Stop the extraction? Finished samples are kept; `/extract resume` continues.",
                ephemeral=True,
                confirm="stop",
            )
        if cmd.verb == "free-gpus" and not cmd.confirmed:
            return self._ask_free_gpus()
        handler = getattr(self, "_" + cmd.verb.replace("-", "_"))
        return self.rationed(TABLE[cmd.verb], user, operator, lambda: handler(cmd, user))

    def rationed(self, verb: Verb, user: str, operator: bool | None, run: Callable[[], Reply]) -> Reply:
        """An expensive read (the verb's every_s) at most so often per person; operators unlimited."""
        every = verb.every_s
        if not every or (self.is_operator(user) if operator is None else operator):
            return run()
        key = f"{user}:{verb.slash} {verb.name}"
        wait = self.allowance.take(key, every)
        if wait:
            return Reply(text=f"`{verb.name}` is limited to once every {human_duration(every)} per person: "
                         f"again in {human_duration(max(1.0, wait))} (operators are not limited)",
                         ephemeral=True, error=True)  # fmt: skip
        reply = run()
        if reply.error:  # nothing was done: it does not count
            self.allowance.give_back(key)
        return reply

    def ask(self, text: str, user: str, operator: bool | None = None) -> Reply:
        return self.handle(parse(text), user, operator)

    # --- read-only -------------------------------------------------------------------

    def _status(self, cmd: Command, user: str) -> Reply:
        reading = self.live.read()
        stale = self.cfg.watcher.heartbeat_stale_s
        if not reading.fresh:  # no answer in time: the last record seen, and what is wrong
            return Reply(
                text=summary.render_reading(reading, stale_s=stale),
                blocks=summary.render_reading_blocks(reading, stale_s=stale),
                ephemeral=True,
                error=True,
            )
        rec = reading.record
        text = extraction.render_text(rec, stale_s=stale)
        if cmd.detail:
            text += "\n" + extraction.render_detail(rec)
        return Reply(
            text=text,
            blocks=summary.render_blocks(rec, stale_s=stale),
            extra={"record": rec},
        )

    def _logs(self, cmd: Command, user: str) -> Reply:
        try:
            lines = self.box.logs(cmd.n, cmd.which)
        except RemoteError as e:
            return Reply(text=summary.render_error(e), ephemeral=True, error=True)
        body = "\n".join(lines).replace("```", "'''") or "(no log lines)"
        if len(body) > 3500:
            body = "…" + body[-3500:]
        what = "log lines" if cmd.which == "all" else f"{cmd.which} log lines"
        return Reply(text=f"last {cmd.n} {what}:\n```\n{body}\n```")

    def _chart(self, cmd: Command, user: str) -> Reply:
        from . import chart

        try:
            events = self.history() if self.history else []
        except RemoteError as e:
            return Reply(text=summary.render_error(e), ephemeral=True, error=True)
        try:
            rec = self.box.status()  # the name, the count now, and a crash events cannot show
        except RemoteError:
            rec = None  # the history alone still draws
        story = chart.story(events, rec, stall_s=self.cfg.watcher.stall_after_s)
        if len(story.points) < 2:
            return Reply(text="chart: not enough history yet (need two progress points)", ephemeral=True)
        return Reply(text=chart.caption(story), image=chart.render_png(story))

    # --- mutating (already authorized) -------------------------------------------------

    def _act(self, cmd: Command, user: str, call: Callable[[], dict]) -> Reply:
        ref = self.audit.attempt(user, cmd.action)  # on record even if the bot dies during the call
        try:
            reply = call()
        except RemoteError as e:
            line = self.audit.record(user, cmd.action, f"error: {type(e).__name__}", str(e), ref=ref)
            return Reply(text=summary.render_error(e) + "\n" + line, ephemeral=True, error=True, audit=line)
        answer = Answer.from_dict(reply)
        line = self.audit.record(user, cmd.action, "ok" if answer.ok else "refused", answer.message, ref=ref)
        return Reply(text=_action_text(cmd, answer), audit=line, error=not answer.ok, extra={"reply": reply})

    def _start(self, cmd: Command, user: str) -> Reply:
        return self._act(cmd, user, lambda: self.box.start(force=cmd.force))

    def _resume(self, cmd: Command, user: str) -> Reply:
        return self._act(cmd, user, lambda: self.box.resume(force=cmd.force))

    def _preflight(self, cmd: Command, user: str) -> Reply:
        try:
            report = self.box.preflight()
        except RemoteError as e:
            return Reply(text=summary.render_error(e), ephemeral=True, error=True)
        return Reply(
            text=extraction.render_preflight(PreflightReport.from_dict(report)), extra={"reply": report}
        )

    def _ask_free_gpus(self) -> Reply:
        """Name the units that hold GPUs and ask; nothing is stopped yet."""
        try:
            report = self.box.preflight()
        except RemoteError as e:
            return Reply(text=summary.render_error(e), ephemeral=True, error=True)
        gpus = PreflightReport.from_dict(report).check("gpus") or Check("gpus", False, "no gpus check")
        if gpus.ok or not gpus.units:
            what = "no other process holds a GPU" if gpus.ok else gpus.detail
            return Reply(text=f"free-gpus: nothing to stop ({what})", ephemeral=True)
        held = extraction.gpus_text(gpus.holders, []) or gpus.detail
        value, until = confirm.bind(gpus.units)
        if len(value) > confirm.MAX_VALUE_CHARS:
            return Reply(text=f"free-gpus: {len(gpus.units)} units are too many to confirm from chat; "
                         "run `hsx-runner preflight --free-gpus` on the GPU box", ephemeral=True)  # fmt: skip
        when = time.strftime("%H:%M UTC", time.gmtime(until))
        return Reply(
            text=f"Stop and disable {', '.join(gpus.units)}? GPUs held: {held}\nThis question expires at {when}.",
            ephemeral=True,
            confirm="free-gpus",
            confirm_value=value,
        )

    def _free_gpus(self, cmd: Command, user: str) -> Reply:
        """Typed with --yes: what holds the GPUs now. Confirmed: only the units the question
        named, and only until it expires (the box refuses if they changed)."""
        if cmd.until is None:
            return self._act(cmd, user, lambda: confirm.free_gpus_reply(self.box.preflight(free_gpus=True)))
        if time.time() > cmd.until:
            line = self.audit.record(user, cmd.action, "refused", "the confirmation expired")
            return Reply(text="`free-gpus` refused: this confirmation expired, nothing stopped; ask again "
                         f"(`{SLASH} free-gpus`)\n{line}", ephemeral=True, error=True, audit=line)  # fmt: skip
        call = lambda: self.box.preflight(free_gpus=True, units=list(cmd.units), until=cmd.until)  # noqa: E731
        return self._act(cmd, user, lambda: confirm.free_gpus_reply(call()))

    def _stop(self, cmd: Command, user: str) -> Reply:
        return self._act(cmd, user, self.box.stop)

    def _adopt(self, cmd: Command, user: str) -> Reply:
        return self._act(cmd, user, lambda: self.box.adopt(cmd.path, background=not cmd.wait))

    def _compact(self, cmd: Command, user: str) -> Reply:
        return self._act(cmd, user, lambda: self.box.compact(background=not cmd.wait))

    def _verify(self, cmd: Command, user: str) -> Reply:
        call = lambda: self.box.verify(repair=cmd.repair, quick=cmd.quick, background=not cmd.wait)  # noqa: E731
        if cmd.mutating:
            return self._act(cmd, user, call)
        try:
            reply = call()
        except RemoteError as e:
            return Reply(text=summary.render_error(e), ephemeral=True, error=True)
        answer = Answer.from_dict(reply)
        return Reply(text=verify_text(answer), error=answer.background and not answer.started,
                     extra={"reply": reply})  # fmt: skip


def verify_text(answer: Answer) -> str:
    """A verify report, or the answer to starting one in the background."""
    if answer.background:
        return background_text("verify", answer)
    return extraction.render_verify(VerifyReport.from_dict(answer.raw))


def background_text(verb: str, answer: Answer) -> str:
    """The answer to starting a long verb in the background."""
    if not answer.started:
        return f"`{verb}` refused: {answer.message or 'no reason given'}"
    return (
        f"{verb} running in the background on the GPU box (pid {answer.pid}): `progress?` shows how far "
        "it is; its result is posted here when it ends"
    )


def confirmed_command(value: object) -> Command | None:
    """The command a confirmation runs (a button's value, the console's yes): the verb by
    name; free-gpus bound to its question (bot/confirm.py). None: not one hsx asked for."""
    if (b := confirm.bound(value)) is not None:
        return Command("free-gpus", confirmed=True, units=b[0], until=b[1])
    return Command(value, confirmed=True) if value in CONFIRMED else None


def _action_text(cmd: Command, answer: Answer) -> str:
    if cmd.verb in ("verify", "adopt", "compact") and answer.background:
        return background_text(cmd.verb, answer)
    if cmd.verb == "compact" and answer.ok:
        return extraction.render_compact(CompactReport.from_dict(answer.raw))
    if cmd.verb == "verify":
        return extraction.render_verify(VerifyReport.from_dict(answer.raw))
    if cmd.verb == "adopt" and answer.ok:
        return extraction.render_adopt(AdoptReport.from_dict(answer.raw))
    if not answer.ok:
        return f"`{cmd.verb}` refused: {answer.message or 'no reason given'}"
    return f"`{cmd.verb}`: {answer.message or 'done'}"
