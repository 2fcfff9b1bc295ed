"""A kind's record as plain text, by its KINDS name (bot/verbs/table.py): each kind's own words
(runner/text), for "progress?", the pinned message and a pipeline's stage. The extraction's is
the same at any audience: it carries no paths."""

from __future__ import annotations

import datetime as dt

from bot.verbs.table import EXTRACTION, MEASURING, REGENERATING, TRAINING
from runner.text.extraction import render_text
from runner.text.measure import render_measure
from runner.text.regenerate import render_regenerate
from runner.text.training import render_train

TEXT = {
    EXTRACTION.name: lambda rec, now, full: render_text(rec, now),
    TRAINING.name: render_train,
    MEASURING.name: render_measure,
    REGENERATING.name: render_regenerate,
}


def text(name: str, rec, now: dt.datetime | None = None, full: bool = True) -> str:
    """``full``: an operator's text, with the paths and the box's words."""
    return TEXT[name](rec, now, full)
