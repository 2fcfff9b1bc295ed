"""`/train VERB` and `hsx train VERB`: the training verbs of the table in ``verbs``, each one
fixed ``hsx-runner train VERB`` (remote.client.GpuBox.train; `chart` draws ``train history``); and
the training's lines in "progress?". Mutating verbs are operators' only and audited (attempt, then outcome) like
`/extract`'s, through the same Handlers (its operator rule, audit log and confirmation buttons).

The record is read through ``Handlers.train_live`` (remote/live.py), so an answer comes within the
status bound whatever the box does. Paths and the trainer's own words are for operators: a
member's text says whom to ask instead (``WITHHELD``), the reason ``logs`` is operators' only."""

from __future__ import annotations

import re
import time

from remote.errors import RemoteError
from runner.contract import timing
from runner.contract.replies import Answer
from runner.contract.train import TrainRecord
from runner.text.training import WITHHELD, render_train

from . import summary
from .audit import ask_operators, mention
from .commands import MAX_INPUT_CHARS, Command, Handlers, Reply
from .mrkdwn import escape
from .verbs import TRAIN_SLASH, TRAIN_TABLE, TRAIN_VERBS, help_text

_MENTION_RE = re.compile(r"^<@[A-Z0-9]+>\s*")
OFFER = "after-extraction"  # what the box offers a start refused while the extraction runs
QUESTIONS = {  # what a verb with a confirmation asks first
    "stop": "Stop the training? The last durable checkpoint stays; `/train resume` continues from it "
    "(the steps since are lost).",
    OFFER: "Start the training by itself when the extraction ends done and its features verify?",
}
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


def confirmed(value: object) -> Command | None:
    """The training verb a confirmation runs (a button's value, the console's yes); None: not one
    the training asked (``Reply.confirm`` is "train VERB")."""
    verb = value.removeprefix("train ") if isinstance(value, str) and value.startswith("train ") else ""
    return Command(verb, confirmed=True) if verb in TRAIN_TABLE and TRAIN_TABLE[verb].confirm else None


def handle(h: Handlers, cmd: Command, user: str, operator: bool | None = None) -> Reply:
    if cmd.verb == "help":
        return help_reply(cmd.problem)
    action, verb = f"train {cmd.verb}", TRAIN_TABLE[cmd.verb]
    if cmd.verb == "chart":
        return h.rationed(verb, user, operator, lambda: chart(h))
    allowed = h.is_operator(user) if operator is None else operator
    if not verb.operator:
        return h.rationed(verb, user, allowed, lambda: status(h, full=allowed))
    if not allowed:
        line = h.audit.record(user, action, "refused: not an operator")
        who = ", ".join(mention(u) for u in h.cfg.slack.operators) or "the operators"
        return Reply(text=f"refused: only operators may `{action}`; ask one of {who}\n{line}",
                     ephemeral=True, error=True, audit=line, markup=True)  # fmt: skip
    if verb.confirm and not cmd.confirmed:  # the click comes back through confirmed()
        return Reply(text=QUESTIONS[cmd.verb], ephemeral=True, confirm=action)
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
    if reply.get("offer") == OFFER:  # a start asked during the extraction: have it start at its end?
        return Reply(text=f"{text}\n{QUESTIONS[OFFER]}", audit=line, ephemeral=True, confirm=f"train {OFFER}")
    return Reply(text=text, audit=line, error=not answer.ok, extra={"reply": reply})


def _said(h: Handlers, text: str, full: bool) -> tuple[str, bool]:
    """(text, markup): a member's text naming whom to ask is escaped here, as it carries mentions."""
    if full or WITHHELD not in text:
        return text, False
    return escape(text).replace(WITHHELD, ask_operators(h.cfg.slack.operators)), True


def status(h: Handlers, full: bool = True) -> Reply:
    """`/train status`: the record, or the last one seen marked stale when the box is slow."""
    r = h.train_live.read()
    if not r.fresh:
        text, markup = _said(h, summary.render_train_reading(r, full=full), full)
        return Reply(text=text, markup=markup, ephemeral=True, error=True)
    ask = "" if full else ask_operators(h.cfg.slack.operators)
    text, markup = _said(h, render_train(r.record, full=full), full)
    blocks = summary.train_blocks(r.record, full=full, ask=ask)
    return Reply(text=text, markup=markup, blocks=blocks, extra={"train": r.record})


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


def progress(h: Handlers, user: str, operator: bool | None = None) -> Reply:
    """ "progress?": the extraction's answer and, with a `[train]` section, the training's once a
    run has started (the last record seen, marked stale, when the box is slow). The training's
    read starts first and shares the extraction's wait: one answer bound for both."""
    if not h.cfg.train.python:
        return h.handle(Command("status"), user, operator)
    t0 = time.monotonic()
    kicked = h.train_live.kick()
    reply = h.handle(Command("status"), user, operator)
    r = h.train_live.read(max(0.0, timing.current().status_answer_s - (time.monotonic() - t0)), kicked)
    if r.record is not None and not r.record.started and not r.record.building:
        return reply
    full = h.is_operator(user) if operator is None else operator
    ask = "" if full else ask_operators(h.cfg.slack.operators)
    if r.fresh:
        said, blocks = render_train(r.record, full=full), summary.train_blocks(r.record, full=full, ask=ask)
    else:
        said, blocks = summary.render_train_reading(r, full=full), None
    text, markup = _said(h, f"{reply.text}\n\n{said}", full)
    if reply.blocks:
        blocks = reply.blocks + (blocks or [summary.asking(b, ask) for b in summary.text_blocks(said)])
    return Reply(text=text, blocks=blocks if reply.blocks else None, markup=markup, ephemeral=reply.ephemeral,
                 error=reply.error, extra={**reply.extra, "train": r.record})  # fmt: skip
