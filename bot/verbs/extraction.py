"""The extraction's verbs (`/extract VERB`, `hsx VERB`): each one's call to the GPU box and the
text of its answer. handlers.py gates, confirms, audits and dispatches them (``RUN``)."""

from __future__ import annotations

import time

from bot.render import summary
from bot.verbs import confirm
from bot.verbs.commands import Command, Reply, answer_text, failed
from bot.verbs.table import SLASH
from remote.errors import RemoteError
from runner.contract.replies import (
    AdoptReport,
    Answer,
    Check,
    CompactReport,
    PreflightReport,
    VerifyReport,
)
from runner.text.extraction import (
    gpus_text,
    render_adopt,
    render_compact,
    render_detail,
    render_preflight,
    render_text,
    render_verify,
)


def status(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    reading = h.live.read()
    stale = h.cfg.watcher.heartbeat_stale_s
    if not reading.fresh:  # no answer in time: the last record seen, and what is wrong
        return Reply(
            text=summary.render_reading(reading, stale_s=stale),
            blocks=summary.render_reading_blocks(reading, stale_s=stale),
            ephemeral=True,
            error=True,
        )
    rec = reading.record
    text = render_text(rec, stale_s=stale)
    if cmd.detail:
        text += "\n" + render_detail(rec)
    return Reply(text=text, blocks=summary.render_blocks(rec, stale_s=stale), extra={"record": rec})


def logs(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    try:
        lines = h.box.logs(cmd.n, cmd.which)
    except RemoteError as e:
        return failed(e)
    body = "\n".join(lines).replace("```", "'''") or "(no log lines)"
    if len(body) > 3500:
        body = "…" + body[-3500:]
    what = "log lines" if cmd.which == "all" else f"{cmd.which} log lines"
    return Reply(text=f"last {cmd.n} {what}:\n```\n{body}\n```")


def chart(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    from bot.render import chart as drawing

    story = lambda events, rec: drawing.story(events, rec, stall_s=h.cfg.watcher.stall_after_s)  # noqa: E731
    history = h.history or list
    need = "history yet (need two progress points)"
    return h.chart(history, h.box.status, story, drawing, need, "hsx-chart.png")


def preflight(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    try:
        report = h.box.preflight()
    except RemoteError as e:
        return failed(e)
    return Reply(text=render_preflight(PreflightReport.from_dict(report)), extra={"reply": report})


def ask_free_gpus(h) -> Reply:
    """Name the units that hold GPUs and ask; nothing is stopped yet."""
    try:
        report = h.box.preflight()
    except RemoteError as e:
        return failed(e)
    gpus = PreflightReport.from_dict(report).check("gpus") or Check("gpus", False, "no gpus check")
    if gpus.ok or not gpus.units:
        what = "no other process holds a GPU" if gpus.ok else gpus.detail
        return Reply(text=f"free-gpus: nothing to stop ({what})", ephemeral=True)
    held = gpus_text(gpus.holders, []) or gpus.detail
    value, until = confirm.bind(gpus.units)
    if len(value) > confirm.MAX_VALUE_CHARS:
        return Reply(text=f"free-gpus: {len(gpus.units)} units are too many to confirm from chat; "
                     "run `hsx-runner preflight --free-gpus` on the GPU box", ephemeral=True)  # fmt: skip
    when = time.strftime("%H:%M UTC", time.gmtime(until))
    return Reply(
        text=f"Stop and disable {', '.join(gpus.units)}? GPUs held: {held}\nThis question expires at {when}.",
        ephemeral=True,
        confirm="free-gpus",
        confirm_value=value,
    )


def free_gpus(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    """Typed with --yes: what holds the GPUs now. Confirmed: only the units the question
    named, and only until it expires (the box refuses if they changed)."""
    if cmd.until is None:
        return h.act(cmd, user, lambda: confirm.free_gpus_reply(h.box.preflight(free_gpus=True)))
    if time.time() > cmd.until:
        line = h.audit.record(user, cmd.action, "refused", "the confirmation expired")
        return Reply(text="`free-gpus` refused: this confirmation expired, nothing stopped; ask again "
                     f"(`{SLASH} free-gpus`)\n{line}", ephemeral=True, error=True, audit=line)  # fmt: skip
    call = lambda: h.box.preflight(free_gpus=True, units=list(cmd.units), until=cmd.until)  # noqa: E731
    return h.act(cmd, user, lambda: confirm.free_gpus_reply(call()))


def start(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    return h.act(cmd, user, lambda: h.box.start(force=cmd.force))


def resume(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    return h.act(cmd, user, lambda: h.box.resume(force=cmd.force))


def stop(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    return h.act(cmd, user, h.box.stop)


def adopt(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    return h.act(cmd, user, lambda: h.box.adopt(cmd.path, background=not cmd.wait), adopted_text)


def compact(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    return h.act(cmd, user, lambda: h.box.compact(background=not cmd.wait), compacted_text)


def verify(h, cmd: Command, user: str, operator: bool | None) -> Reply:
    call = lambda: h.box.verify(repair=cmd.repair, quick=cmd.quick, background=not cmd.wait)  # noqa: E731
    if cmd.mutating:
        return h.act(cmd, user, call, verified_text)
    try:
        reply = call()
    except RemoteError as e:
        return failed(e)
    answer = Answer.from_dict(reply)
    return Reply(text=verified_text(cmd, answer), error=answer.background and not answer.started,
                 extra={"reply": reply})  # fmt: skip


RUN = {
    "status": status,
    "start": start,
    "resume": resume,
    "preflight": preflight,
    "free-gpus": free_gpus,
    "stop": stop,
    "verify": verify,
    "adopt": adopt,
    "compact": compact,
    "logs": logs,
    "chart": chart,
}
ASK = {"free-gpus": ask_free_gpus}  # its question names the units it would stop


def background_text(verb: str, answer: Answer) -> str:
    """The answer to starting a long verb in the background."""
    if not answer.started:
        return f"`{verb}` refused: {answer.message or 'no reason given'}"
    return (
        f"{verb} running in the background on the GPU box (pid {answer.pid}): `progress?` shows how far "
        "it is; its result is posted here when it ends"
    )


def report_text(render_report, parse, failed_is_report: bool = False):
    """The text of a long verb's answer: started in the background, its report, or refused
    (``failed_is_report``: a verify that finds bad samples answers not ok, and that is its report)."""

    def text(cmd: Command, answer: Answer) -> str:
        if answer.background:
            return background_text(cmd.verb, answer)
        if answer.ok or failed_is_report:
            return render_report(parse(answer.raw))
        return answer_text(cmd, answer)

    return text


verified_text = report_text(render_verify, VerifyReport.from_dict, failed_is_report=True)
adopted_text = report_text(render_adopt, AdoptReport.from_dict)
compacted_text = report_text(render_compact, CompactReport.from_dict)
