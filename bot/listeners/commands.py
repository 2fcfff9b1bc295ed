"""`/extract <verb>`: acknowledge at once, do the SSH work in a lazy listener."""

from __future__ import annotations

from ..runtime import Runtime
from ..slack_out import respond_reply


def register(app, rt: Runtime) -> None:
    def ack_now(ack):
        ack()

    def run(body, respond, client):
        reply = rt.handlers.ask(body.get("text") or "", body.get("user_id", ""))
        respond_reply(reply, respond, client, body.get("channel_id"))

    app.command("/extract")(ack=ack_now, lazy=[run])
