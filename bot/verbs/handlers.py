"""Runs a parsed Command of any kind against one GPU box, for Slack, the console and `hsx`.

Written once for every kind: the operator gate and its audit, the confirmation a verb asks
first, the allowance for expensive reads, an action's attempt-then-outcome audit, and the
dispatch to the kind's own verb handlers (``RUN``: a module per kind, its verbs by name).
"""

from __future__ import annotations

from collections.abc import Callable

from bot.render import summary
from bot.verbs import extraction, measure, pipeline, regenerate, train
from bot.verbs.access import Allowance
from bot.verbs.audit import AuditLog, mention, without_paths
from bot.verbs.commands import Command, Reply, answer_text, failed, help_reply, parse
from bot.verbs.table import EXTRACTION, KINDS, MEASURING, PIPELINE, REGENERATING, TRAINING, Kind, Verb
from remote.errors import RemoteError
from remote.live import LiveStatus, kind_live
from runner.contract.config import Config
from runner.contract.kinds import KINDS as RUNNER_KINDS
from runner.contract.replies import Answer
from runner.text.human import human_duration

# Each kind's handlers: verb -> run(handlers, command, user, operator) -> Reply; and the verbs
# that build their own confirmation question (free-gpus names the units it would stop).
RUN = {
    EXTRACTION.name: extraction.RUN,
    TRAINING.name: train.RUN,
    MEASURING.name: measure.RUN,
    REGENERATING.name: regenerate.RUN,
    PIPELINE.name: pipeline.RUN,
}
ASK = {EXTRACTION.name: extraction.ASK} | {k: {} for k in KINDS if k != EXTRACTION.name}


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
        lives: dict[str, LiveStatus] | None = None,
    ):
        self.box = box
        self.live = live if live is not None else LiveStatus(box)  # status within a bound
        # every other kind's, by its runner name (runner.contract.kinds)
        self.lives = lives if lives is not None else {k: kind_live(box, k) for k in RUNNER_KINDS}
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

    def allowed(self, user: str, operator: bool | None) -> bool:
        """An operator: as the caller knows it (the console, a terminal), or as Slack says."""
        return self.is_operator(user) if operator is None else operator

    def ask(self, text: str, user: str, operator: bool | None = None, kind: Kind = EXTRACTION) -> Reply:
        return self.handle(parse(text, kind), user, operator)

    def handle(self, cmd: Command, user: str, operator: bool | None = None) -> Reply:
        if cmd.verb == "help":
            return help_reply(cmd.problem, KINDS[cmd.kind])
        if cmd.mutating and not self.allowed(user, operator):
            line = self.audit.record(user, cmd.action, "refused: not an operator")
            who = ", ".join(mention(u) for u in self.cfg.slack.operators) or "the operators"
            return Reply(text=f"refused: only operators may `{cmd.action}`; ask one of {who}\n{line}",
                         ephemeral=True, error=True, audit=line,
                         markup=True)  # the action (parsed words) and configured operators only  # fmt: skip
        verb = cmd.row
        if verb.confirm and not cmd.confirmed:
            if (build := ASK[cmd.kind].get(cmd.verb)) is not None:
                return build(self)
            return Reply(text=verb.question, ephemeral=True, confirm=cmd.name)
        run = RUN[cmd.kind][cmd.verb]
        return self.rationed(verb, user, operator, lambda: run(self, cmd, user, operator))

    def rationed(self, verb: Verb, user: str, operator: bool | None, run: Callable[[], Reply]) -> Reply:
        """An expensive read (the verb's every_s) at most so often per person; operators unlimited."""
        every = verb.every_s
        if not every or self.allowed(user, operator):
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

    def act(
        self,
        cmd: Command,
        user: str,
        call: Callable[[], dict],
        text: Callable[[Command, Answer], str] | None = None,
    ) -> Reply:
        """A mutating call, audited before (on record even if the bot dies during it) and after."""
        ref = self.audit.attempt(user, cmd.action)
        try:
            reply = call()
        except RemoteError as e:
            line = self.audit.record(user, cmd.action, f"error: {type(e).__name__}", str(e), ref=ref)
            return Reply(text=summary.render_error(e) + "\n" + line, ephemeral=True, error=True, audit=line)
        answer = Answer.from_dict(reply)
        line = self.audit.record(user, cmd.action, "ok" if answer.ok else "refused", answer.message, ref=ref)
        said = (text or answer_text)(cmd, answer)
        public = without_paths(said)
        return Reply(text=said, audit=line, error=not answer.ok, extra={"reply": reply},
                     public=public if public != said else "")  # fmt: skip

    def chart(
        self, history: Callable, record: Callable, story: Callable, draw, need: str, name: str
    ) -> Reply:
        """One chart frame for every kind: its history from the box, its record when the box says
        it (the history alone still draws), ``story`` made of them, drawn by ``draw`` (its caption
        and render_png); ``need``: what too short a history lacks."""
        try:
            events = history()
        except RemoteError as e:
            return failed(e)
        try:
            rec = record()  # the name, the count now, and an end the history cannot show
        except RemoteError:
            rec = None
        told = story(events, rec)
        if len(told.points) < 2:
            return Reply(text=f"chart: not enough {need}", ephemeral=True)
        return Reply(text=draw.caption(told), image=draw.render_png(told), image_name=name)
