"""Each kind's slash command (`/extract <verb>`, `/train <verb>`): acknowledge at once, do the SSH work in a lazy listener."""

from __future__ import annotations

from bot.slack.runtime import Runtime
from bot.slack.slack_out import respond_reply
from bot.verbs.access import refusal
from bot.verbs.table import KINDS


def register(app, rt: Runtime) -> None:
    def ack_now(ack):
        ack()

    def answer(kind):
        def run(body, respond, client):
            user, channel = body.get("user_id", ""), body.get("channel_id", "")
            why = refusal(rt.cfg, rt.is_member, channel, user, body.get("channel_name", ""))
            if why:
                respond(text=why, response_type="ephemeral")
                return
            respond_reply(rt.handlers.ask(body.get("text") or "", user, kind=kind), respond, client, channel)

        run.__name__ = f"run_{kind.name}"  # Bolt names a lazy listener by its function
        return run

    for kind in KINDS.values():
        app.command(kind.slash)(ack=ack_now, lazy=[answer(kind)])
