"""\"progress?\": the pipeline first where ``[pipeline] stages`` names one (stage k of n, its
progress, its ETA), then the extraction's answer, then each other kind's once its run has started
(the training's, the measurement's, the regeneration's), each the last record seen, marked stale,
when the box is slow.
Every read starts first and shares the extraction's wait: one answer bound for all.
``said``: a kind's fresh record as the answer says it, its text and blocks; the watcher's pinned
message (bot/watch/pinned.py) says the same of what runs."""

from __future__ import annotations

import datetime as dt
import functools
import time

from bot.render import summary, texts
from bot.verbs import measure, pipeline, regenerate
from bot.verbs.audit import ask_operators, for_member
from bot.verbs.commands import Command, Reply
from bot.verbs.table import EXTRACTION, MEASURING, PIPELINE, REGENERATING, TRAINING
from runner.contract import timing
from runner.contract.kinds import KINDS as SPECS
from runner.contract.status import NOT_STARTED, STALE_S
from runner.text.extraction import render_text
from runner.text.training import render_train


def plain(text: str, ask: str) -> tuple[str, list[dict]]:
    """A part that is text alone, as its blocks."""
    return text, [summary.asking(b, ask) for b in summary.text_blocks(text)]


def said(name: str, rec, now: dt.datetime | None = None, full: bool = True, ask: str = "",
         stale_s: float = STALE_S) -> tuple[str, list[dict]]:  # fmt: skip
    """A kind's fresh record (by its KINDS name; the pipeline's: its status reply, alone) as
    "progress?" says it: its text and its blocks; ``full``: an operator's, else ``ask`` names
    whom to ask where a member's text withholds something."""
    if name == EXTRACTION.name:  # as its status verb answers (bot/verbs/extraction.py)
        return render_text(rec, now, stale_s), summary.render_blocks(rec, now, stale_s)
    if name == TRAINING.name:
        return render_train(rec, now, full), summary.train_blocks(rec, now, full, ask)
    render = pipeline.brief if name == PIPELINE.name else functools.partial(texts.text, name)
    return plain(render(rec, now, full), ask)


def _training(h, r, full: bool, ask: str) -> tuple[str, list | None] | None:
    rec = r.record
    if rec is not None and not rec.started and not rec.building:
        return None
    if not r.fresh:
        return summary.render_train_reading(r, full=full), None
    return said(TRAINING.name, rec, full=full, ask=ask)


def _started(name: str, reading):
    """A supervised kind's part (the measurement's, the regeneration's): its record as its verbs
    module reads it, once its run has started."""

    def part(h, r, full: bool, ask: str) -> tuple[str, list | None] | None:
        if r.record is None or not r.record.started_at:
            return None  # never seen, or not started: "progress?" does not say it
        return said(name, r.record, full=full, ask=ask) if r.fresh else (reading(r, full), None)

    return part


# each other kind: its word (its reader in Handlers.lives; whether its config asks for it:
# runner.contract.kinds' followed), its part
PARTS = (
    ("train", _training),
    ("measure", _started(MEASURING.name, measure.reading)),
    ("regenerate", _started(REGENERATING.name, regenerate.reading)),
)


def _pipeline(h, r, full: bool, ask: str) -> tuple[str, list | None]:
    """The pipeline alone (each stage's own part follows as its kind's), started or not."""
    if r.fresh:
        return said(PIPELINE.name, r.record, full=full, ask=ask)
    return pipeline.reading(r, full, pipeline.brief), None


def progress(h, user: str, operator: bool | None = None) -> Reply:
    parts = [(word, h.lives[word], part_of) for word, part_of in PARTS if SPECS[word].followed(h.cfg)]
    first = [("pipeline", h.lives["pipeline"], _pipeline)] if SPECS["pipeline"].followed(h.cfg) else []
    if not parts and not first:
        return h.handle(Command("status"), user, operator)
    t0 = time.monotonic()
    kicked = [live.kick() for _, live, _ in first + parts]
    reply = h.handle(Command("status"), user, operator)
    full = h.allowed(user, operator)
    ask = "" if full else ask_operators(h.cfg.slack.operators)
    texts, blocks, extra = [reply.text], list(reply.blocks or []), dict(reply.extra)
    rec = reply.extra.get("record")
    if first and rec is not None and rec.phase.value == "stopped" and rec.reason == NOT_STARTED:
        texts, blocks = [], []  # a pipeline's extraction not reached yet: the pipeline says so
    for i, ((word, live, part_of), k) in enumerate(zip(first + parts, kicked, strict=True)):
        r = live.read(max(0.0, timing.current().status_answer_s - (time.monotonic() - t0)), k)
        part = part_of(h, r, full, ask)
        if part is None:
            continue
        said_blocks = part[1] or plain(part[0], ask)[1]
        if i < len(first):  # the pipeline's begins the answer
            texts.insert(0, part[0])
            blocks[:0] = said_blocks
        else:
            texts.append(part[0])
            blocks += said_blocks
        extra[word] = r.record
    if len(texts) == 1 and texts[0] == reply.text:
        return reply
    text, markup = for_member("\n\n".join(texts), full, h.cfg.slack.operators)
    return Reply(text=text, blocks=blocks if reply.blocks else None, markup=markup, ephemeral=reply.ephemeral,
                 error=reply.error, extra=extra)  # fmt: skip
