"""`progress?` / `status?` (the "?" optional) in a channel the bot serves, or in a direct
message from a member of one: answer with the summary (anywhere else: silence)."""

from __future__ import annotations

import re

from bot.slack.runtime import Runtime
from bot.slack.slack_out import post_reply
from bot.verbs.access import refusal
from bot.verbs.progress import progress

QUESTION = re.compile(r"^\s*(<@[A-Z0-9]+>\s*)?(progress|status)\s*\?*\s*$", re.IGNORECASE)


def register(app, rt: Runtime) -> None:
    @app.message(QUESTION)
    def answer_progress(message, client):
        channel, user = message.get("channel", ""), message.get("user", "")
        dm = "directmessage" if message.get("channel_type") == "im" else ""
        if refusal(rt.cfg, rt.is_member, channel, user, dm):
            return
        reply = progress(rt.handlers, user)
        post_reply(reply, client, channel, thread_ts=message.get("thread_ts"))

    @app.event("message")
    def other_messages():
        """Chatter the bot does not answer: acknowledged, so Slack does not redeliver it."""
