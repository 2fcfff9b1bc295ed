"""What the verbs of a kind run as a supervised job on the box share (the measurement's, the
regeneration's, the pipeline's): each mutating verb is the fixed ``hsx-runner KIND VERB``
(remote.client.GpuBox's method of the kind's name), audited before and after; `status` is the
record read through the handlers' live reader of the kind (remote/live.py), so an answer comes
within the status bound whatever the box does; a member's text says whom to ask where an
operator's has paths and the box's words (``WITHHELD``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.render import summary
from bot.verbs.audit import for_member
from bot.verbs.commands import Command, Reply


@dataclass(frozen=True)
class Verbs:
    row: object  # the kind's row of the kinds table (bot/verbs/table.py): its verbs
    word: str  # "measurement": how its text names it
    name: str  # "measure": the runner's command, the box's method, the live reader's and reply's key
    render: Callable[..., str]  # its record's text: render(record, full=...)

    def act(self, h, cmd: Command, user: str, operator: bool | None) -> Reply:
        """A mutating verb: ``hsx-runner KIND VERB``, audited before and after."""
        return h.act(cmd, user, lambda: h.box.call(self.name, cmd.verb))

    def reading(self, r, full: bool, each: Callable[..., str] | None = None) -> str:
        """The record read, or the last one seen marked stale when the box is slow; ``each``
        draws it in place of the kind's own text."""
        each = each or self.render
        if r.fresh:
            return each(r.record, full=full)
        return summary.render_kind_reading(r, self.word, f"{self.name} status", each, full=full)

    def status(self, h, cmd: Command, user: str, operator: bool | None) -> Reply:
        """`/KIND status`: the record; a member's without the paths and the box's words."""
        full = h.allowed(user, operator)
        r = h.lives[self.name].read()
        text, markup = for_member(self.reading(r, full), full, h.cfg.slack.operators)
        if not r.fresh:
            return Reply(text=text, markup=markup, ephemeral=True, error=True)
        return Reply(text=text, markup=markup, extra={self.name: r.record})

    def run(self, **more) -> dict:
        """handlers.py's dispatch for the kind: status, ``more`` (its chart), each mutating verb."""
        return {"status": self.status, **more} | {v.name: self.act for v in self.row.verbs if v.operator}
