"""Turning a commands.Reply into Slack messages, one place for every listener.

A reply's text is plain (a terminal shows it too): it is escaped here, and the audit line,
hsx's own markup, is added after. Its blocks come escaped from summary.
"""

from __future__ import annotations

import dataclasses

from bot.render.mrkdwn import escape
from bot.verbs.commands import Reply, confirmed_command

CONFIRM = (
    "hsx_confirm"  # its value: the verb (stop), or what free-gpus is bound to (commands.confirmed_command)
)
CONFIRM_BEFORE = "hsx_stop_confirm"  # the id stop buttons had before; messages out there still carry it
CANCEL = "hsx_stop_cancel"


def slack_text(reply: Reply) -> str:
    """The reply's text as Slack mrkdwn: escaped, but for an audit line within it."""
    if reply.markup:
        return reply.text
    if reply.audit and reply.audit in reply.text:
        head, _, tail = reply.text.partition(reply.audit)
        return escape(head) + reply.audit + escape(tail)
    return escape(reply.text)


def text_with_audit(reply: Reply) -> str:
    if reply.audit and reply.audit not in reply.text:
        return f"{slack_text(reply)}\n{reply.audit}"
    return slack_text(reply)


def channel_text(reply: Reply) -> str:
    """What the channel reads of a reply: its ``public`` text where it has one, with the audit line."""
    return text_with_audit(dataclasses.replace(reply, text=reply.public or reply.text))


def blocks_with_audit(reply: Reply) -> list[dict] | None:
    if not reply.blocks:
        return None
    blocks = list(reply.blocks)
    if reply.audit:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": reply.audit}]})
    return blocks


def confirm_blocks(text: str, verb: str, value: str = "") -> list[dict]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": CONFIRM,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": confirmed_command(verb).row.confirm},
                    "value": value or verb,
                },
                {
                    "type": "button",
                    "action_id": CANCEL,
                    "text": {"type": "plain_text", "text": "Cancel"},
                    "value": "cancel",
                },
            ],
        },
    ]


def respond_reply(reply: Reply, respond, client, channel: str | None) -> None:
    """Answer a slash command (or anything with a response_url)."""
    if reply.confirm:
        text = slack_text(reply)
        blocks = confirm_blocks(text, reply.confirm, reply.confirm_value)
        respond(text=text, blocks=blocks, response_type="ephemeral")
        return
    if reply.image is not None and channel:
        client.files_upload_v2(
            channel=channel,
            content=reply.image,
            filename=reply.image_name,
            title=reply.image_name.removesuffix(".png"),
            initial_comment=slack_text(reply),
        )
        return
    if reply.public and not reply.ephemeral:  # the channel without the box's paths; the asker with
        respond(text=channel_text(reply), blocks=blocks_with_audit(reply), response_type="in_channel")
        respond(text=slack_text(reply), response_type="ephemeral", replace_original=False)
        return
    kind = "ephemeral" if reply.ephemeral else "in_channel"
    respond(text=text_with_audit(reply), blocks=blocks_with_audit(reply), response_type=kind)


def post_reply(reply: Reply, client, channel: str, thread_ts: str | None = None) -> None:
    """Answer in a channel (a message such as "progress?")."""
    client.chat_postMessage(
        channel=channel, text=text_with_audit(reply), blocks=blocks_with_audit(reply), thread_ts=thread_ts
    )
