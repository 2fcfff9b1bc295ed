"""Buttons: confirm or cancel a stop (any kind's) or free-gpus, and Resume on a crash alert (once
per alert, and only while that alert stands: its run still crashed or failed in that launch; it
runs the verb the alert's kind resumes with: `/train resume`, `/pipeline start`)."""

from __future__ import annotations

from bot.slack.runtime import Runtime
from bot.slack.slack_out import CANCEL, CONFIRM, CONFIRM_BEFORE, channel_text, slack_text, text_with_audit
from bot.verbs.access import refusal
from bot.verbs.commands import Command, confirmed_command
from bot.verbs.table import kind_of_key
from bot.watch import standing
from bot.watch.action import RESUME
from remote.errors import RemoteError


def _ack(ack):
    ack()


def _refused(rt: Runtime, body: dict, respond) -> bool:
    """A click counts only where a command would: the same channel rule."""
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or ""
    name = (body.get("channel") or {}).get("name", "")
    why = refusal(rt.cfg, rt.is_member, channel, body["user"]["id"], name)
    if why:
        respond(text=why, response_type="ephemeral", replace_original=False)
    return bool(why)


def _gone(rt: Runtime, key: str) -> str | None:
    """Why the alert ``key`` no longer stands (the run resumed, ended or started again since); None
    where it stands, or where the box cannot say now (the resume itself then says what it finds)."""
    kind = standing.judged(key)
    if kind is None:
        return None
    try:
        d = rt.handlers.box.record(kind.word).to_dict()
    except RemoteError:
        return None
    if standing.stands(key, d):
        return None
    return (
        f"this alert no longer stands: the {kind.name} has moved on since (it reads {d.get('phase')} now); "
        f"nothing was resumed. `{kind.slash} status` says where it is"
    )


def register(app, rt: Runtime) -> None:
    def confirm(body, respond):
        if _refused(rt, body, respond):
            return
        user = body["user"]["id"]
        value = (body.get("actions") or [{}])[0].get("value", "stop")
        cmd = confirmed_command(value)  # "stop", "train stop", free-gpus' bound units
        if cmd is None:  # the value is ours; anything else is not a button we sent
            return
        reply = rt.handlers.handle(cmd, user)
        if reply.ephemeral:
            respond(text=text_with_audit(reply), replace_original=True, response_type="ephemeral")
            return
        respond(delete_original=True)
        respond(text=channel_text(reply), response_type="in_channel", replace_original=False)
        if reply.public:
            respond(text=slack_text(reply), response_type="ephemeral", replace_original=False)

    def cancel(respond):
        respond(delete_original=True)

    def resume_from_alert(body, respond):
        if _refused(rt, body, respond):
            return
        user = body["user"]["id"]
        key = (body.get("actions") or [{}])[0].get("value", "")
        original = (body.get("message") or {}).get("text", "")
        kind = kind_of_key(key)
        cmd = Command(kind.resume, kind=kind.name)  # the alert's kind: `/train resume`, `/pipeline start`
        resume = lambda **op: rt.handlers.handle(cmd, user, **op)  # noqa: E731
        if not rt.handlers.is_operator(user):
            reply = resume()  # refused and audited
            respond(text=reply.text, response_type="ephemeral", replace_original=False)
            return
        if why := _gone(rt, key):
            respond(text=why, response_type="ephemeral", replace_original=False)
            return
        if not rt.buttons.claim(key, user):
            who = rt.buttons.owner(key) or "someone"
            respond(
                text=f"already resumed from this alert by <@{who}>",
                response_type="ephemeral",
                replace_original=False,
            )
            return
        reply = resume(operator=True)
        if reply.error:
            rt.buttons.release(key)  # let someone try again
            respond(text=text_with_audit(reply), response_type="ephemeral", replace_original=False)
            return
        respond(text=f"{original}\n{channel_text(reply)}", replace_original=True)
        if reply.public:
            respond(text=slack_text(reply), response_type="ephemeral", replace_original=False)

    app.action(CONFIRM)(ack=_ack, lazy=[confirm])
    app.action(CONFIRM_BEFORE)(ack=_ack, lazy=[confirm])
    app.action(CANCEL)(ack=_ack, lazy=[cancel])
    app.action(RESUME)(ack=_ack, lazy=[resume_from_alert])
