"""`/extract <verb>`: acknowledge at once, do the SSH work in a lazy listener."""

from __future__ import annotations

from ..access import refusal
from ..runtime import Runtime
from ..slack_out import respond_reply


def register(app, rt: Runtime) -> None:
    def ack_now(ack):
        ack()

    def run(body, respond, client):
        user, channel = body.get("user_id", ""), body.get("channel_id", "")
        why = refusal(rt.cfg, rt.is_member, channel, user, body.get("channel_name", ""))
        if why:
            respond(text=why, response_type="ephemeral")
            return
        reply = rt.handlers.ask(body.get("text") or "", user)
        respond_reply(reply, respond, client, channel)

    app.command("/extract")(ack=ack_now, lazy=[run])
