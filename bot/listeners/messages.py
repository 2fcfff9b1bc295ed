"""`progress?` / `status?` in a channel the bot watches: answer with the summary."""

from __future__ import annotations

import re

from ..commands import Command
from ..runtime import Runtime
from ..slack_out import post_reply

QUESTION = re.compile(r"^\s*(<@[A-Z0-9]+>\s*)?(progress|status)\s*\?+\s*$", re.IGNORECASE)


def register(app, rt: Runtime) -> None:
    @app.message(QUESTION)
    def answer_progress(message, client):
        channel = message.get("channel", "")
        if rt.cfg.slack.channels and channel not in rt.cfg.slack.channels:
            return
        reply = rt.handlers.handle(Command("status"), message.get("user", ""))
        post_reply(reply, client, channel, thread_ts=message.get("thread_ts"))
