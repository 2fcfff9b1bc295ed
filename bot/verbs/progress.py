"""\"progress?\": the pipeline first where ``[pipeline] stages`` names one (stage k of n, its
progress, its ETA), then the extraction's answer, then each other kind's once its run has started
(the training's, the measurement's, the regeneration's), each the last record seen, marked stale,
when the box is slow.
Every read starts first and shares the extraction's wait: one answer bound for all."""

from __future__ import annotations

import time

from bot.render import summary
from bot.verbs import measure, pipeline, regenerate
from bot.verbs.audit import ask_operators, for_member
from bot.verbs.commands import Command, Reply
from runner.contract import timing
from runner.contract.status import NOT_STARTED
from runner.text.training import render_train


def _training(h, r, full: bool, ask: str) -> tuple[str, list | None] | None:
    rec = r.record
    if rec is not None and not rec.started and not rec.building:
        return None
    if not r.fresh:
        return summary.render_train_reading(r, full=full), None
    return render_train(rec, full=full), summary.train_blocks(rec, full=full, ask=ask)


def _started(reading):
    """A supervised kind's part (the measurement's, the regeneration's): its record as its verbs
    module reads it, once its run has started."""

    def part(h, r, full: bool, ask: str) -> tuple[str, list | None] | None:
        if r.record is None or not r.record.started_at:
            return None  # never seen, or not started: "progress?" does not say it
        return reading(r, full), None

    return part


# each other kind: its word, whether its config asks for it, its reader on the handlers, its part
PARTS = (
    ("train", lambda cfg: bool(cfg.train.python), "train_live", _training),
    ("measure", measure.wanted, "measure_live", _started(measure.reading)),
    ("regenerate", regenerate.wanted, "regenerate_live", _started(regenerate.reading)),
)


def _pipeline(h, r, full: bool, ask: str) -> tuple[str, list | None]:
    """The pipeline alone (each stage's own part follows as its kind's), started or not."""
    return pipeline.reading(r, full, pipeline.brief), None


def progress(h, user: str, operator: bool | None = None) -> Reply:
    parts = [(word, getattr(h, live), said) for word, on, live, said in PARTS if on(h.cfg)]
    first = [("pipeline", h.pipeline_live, _pipeline)] if h.cfg.pipeline.stages else []
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
    for (word, live, said), k in zip(first + parts, kicked, strict=True):
        r = live.read(max(0.0, timing.current().status_answer_s - (time.monotonic() - t0)), k)
        part = said(h, r, full, ask)
        if part is None:
            continue
        said_blocks = part[1] or [summary.asking(b, ask) for b in summary.text_blocks(part[0])]
        if word == "pipeline":  # it begins the answer
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
