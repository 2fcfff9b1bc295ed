"""`/train VERB` and `hsx train VERB`: the training verbs of the table in ``verbs``, each one
fixed ``hsx-runner train VERB`` (remote.client.GpuBox.train; `chart` draws ``train history``); and
the training's lines in "progress?". Mutating verbs are operators' only and audited (attempt, then outcome) like
`/extract`'s, through the same Handlers (its operator rule and audit log)."""

from __future__ import annotations

import re

from remote.errors import RemoteError
from runner.contract.replies import Answer
from runner.contract.train import TrainRecord, render_train

from . import summary
from .audit import mention
from .commands import MAX_INPUT_CHARS, Command, Handlers, Reply
from .verbs import TRAIN_SLASH, TRAIN_TABLE, TRAIN_VERBS, help_text

_MENTION_RE = re.compile(r"^<@[A-Z0-9]+>\s*")
HELP = help_text(TRAIN_VERBS)


def parse_train(text: object) -> Command:
    """One plain word of the table; anything else is help with the reason."""
    if not isinstance(text, str):
        return Command("help", problem="input is not text")
    if len(text) > MAX_INPUT_CHARS or any(ord(c) < 32 and c not in " \t" or ord(c) == 127 for c in text):
        return Command("help", problem="input refused: commands are a few plain words")
    s = _MENTION_RE.sub("", text.strip()).strip().lower()
    if s.startswith(TRAIN_SLASH):
        s = s[len(TRAIN_SLASH) :]
    words = s.split()
    if not words:
        return Command("help")
    if words[0] not in TRAIN_TABLE:
        shown = words[0] if re.fullmatch(r"[a-z0-9-]{1,24}", words[0]) else "that"
        return Command("help", problem=f"unknown training command `{shown}`")
    if len(words) > 1:
        return Command("help", problem=f"`{TRAIN_SLASH} {words[0]}` takes no arguments")
    return Command(words[0])


def help_reply(problem: str = "") -> Reply:
    return Reply(text=(f"{problem}\n\n" if problem else "") + HELP, ephemeral=True, error=bool(problem))


def ask(h: Handlers, text: str, user: str, operator: bool | None = None) -> Reply:
    return handle(h, parse_train(text), user, operator)


def handle(h: Handlers, cmd: Command, user: str, operator: bool | None = None) -> Reply:
    if cmd.verb == "help":
        return help_reply(cmd.problem)
    action, verb = f"train {cmd.verb}", TRAIN_TABLE[cmd.verb]
    if cmd.verb == "chart":
        return h.rationed(verb, user, operator, lambda: chart(h))
    if not verb.operator:
        return status(h)
    allowed = h.is_operator(user) if operator is None else operator
    if not allowed:
        line = h.audit.record(user, action, "refused: not an operator")
        who = ", ".join(mention(u) for u in h.cfg.slack.operators) or "the operators"
        return Reply(text=f"refused: only operators may `{action}`; ask one of {who}\n{line}",
                     ephemeral=True, error=True, audit=line, markup=True)  # fmt: skip
    ref = h.audit.attempt(user, action)  # on record even if the bot dies during the call
    try:
        reply = h.box.train(cmd.verb)
    except RemoteError as e:
        line = h.audit.record(user, action, f"error: {type(e).__name__}", str(e), ref=ref)
        return Reply(text=summary.render_error(e) + "\n" + line, ephemeral=True, error=True, audit=line)
    answer = Answer.from_dict(reply)
    line = h.audit.record(user, action, "ok" if answer.ok else "refused", answer.message, ref=ref)
    said = answer.message or "done"
    text = f"`{action}`: {said}" if answer.ok else f"`{action}` refused: {said}"
    return Reply(text=text, audit=line, error=not answer.ok, extra={"reply": reply})


def status(h: Handlers) -> Reply:
    try:
        rec = h.box.train_status()
    except RemoteError as e:
        return Reply(text=summary.render_error(e), ephemeral=True, error=True)
    return Reply(text=render_train(rec), blocks=summary.train_blocks(rec), extra={"train": rec})


def chart(h: Handlers) -> Reply:
    """The history's loss and acc over the steps, the evals, each crash and resume, as a PNG."""
    from . import train_chart

    try:
        history = h.box.train_history()
    except RemoteError as e:
        return Reply(text=summary.render_error(e), ephemeral=True, error=True)
    try:
        rec: TrainRecord | None = h.box.train_status()  # the run's name and total, an end unwritten
    except RemoteError:
        rec = None  # the history alone still draws
    story = train_chart.story(history, rec)
    if len(story.points) < 2:
        return Reply(text="chart: not enough training history yet (need two logged steps)", ephemeral=True)
    return Reply(text=train_chart.caption(story), image=train_chart.render_png(story),
                 image_name="hsx-train-chart.png")  # fmt: skip


def with_training(reply: Reply, h: Handlers) -> Reply:
    """ "progress?" with a `[train]` section: the extraction's answer, then the training's once
    a run has started (an unreadable record is said, and the extraction's answer stands)."""
    if not h.cfg.train.python or reply.error:
        return reply
    try:
        rec: TrainRecord | None = h.box.train_status()
        text, blocks = render_train(rec), summary.train_blocks(rec)
    except RemoteError as e:
        rec, text, blocks = None, f"training: unreadable ({summary.render_error(e)})", None
    if rec is not None and not rec.started:
        return reply
    blocks = (reply.blocks or []) + (blocks or summary.text_blocks(text)) if reply.blocks else None
    return Reply(text=f"{reply.text}\n\n{text}", blocks=blocks, extra={**reply.extra, "train": rec})
