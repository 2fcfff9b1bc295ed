"""`/extract <verb>` and `/train <verb>`: acknowledge at once, do the SSH work in a lazy listener."""

from __future__ import annotations

from ..access import refusal
from ..runtime import Runtime
from ..slack_out import respond_reply
from ..train import ask as ask_train
from ..verbs import SLASH, TRAIN_SLASH


def register(app, rt: Runtime) -> None:
    def ack_now(ack):
        ack()

    def answer(ask, name: str):
        def run(body, respond, client):
            user, channel = body.get("user_id", ""), body.get("channel_id", "")
            why = refusal(rt.cfg, rt.is_member, channel, user, body.get("channel_name", ""))
            if why:
                respond(text=why, response_type="ephemeral")
                return
            respond_reply(ask(body.get("text") or "", user), respond, client, channel)

        run.__name__ = f"run_{name}"  # Bolt names a lazy listener by its function
        return run

    app.command(SLASH)(ack=ack_now, lazy=[answer(rt.handlers.ask, "extract")])
    train = answer(lambda text, user: ask_train(rt.handlers, text, user), "train")
    app.command(TRAIN_SLASH)(ack=ack_now, lazy=[train])
