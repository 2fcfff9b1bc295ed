"""The watcher's judging of the training record (``hsx-runner train status``), apart from the
extraction's: a crash (with the reason and a Resume button that runs `/train resume`), a NaN
loss, loss and acc both 0 over several logs (SpecForge's empty-mask trap), and done with the
export path. Each is posted once per episode: a launch of the run (or its end, for done)."""

from __future__ import annotations

import dataclasses
import logging

from remote.errors import RemoteError
from runner.contract.train import TrainRecord, render_train

from .slack_out import TRAIN_KEY, Action

log = logging.getLogger("hsx.watcher")
ZERO_LOGS = 3  # this many logged steps in a row with loss and acc both 0 is the empty-mask trap
MAX_KEYS = 50


def _reason(rec: TrainRecord) -> str:
    """The reason's head: the traceback's last line, without the checkpoint note after it."""
    why = (
        (rec.reason or "no reason given").split("; the last complete checkpoint")[0].split("; no complete")[0]
    )
    return why.split(": ", 1)[1] if why.startswith("the trainer exited with code") and ": " in why else why


def judge(st, rec: TrainRecord) -> tuple[list[Action], object]:
    """Pure: the watcher's state (its train_* fields) and one record → what to post, next state."""
    st = dataclasses.replace(
        st, train_active=list(st.train_active), train_zero_steps=list(st.train_zero_steps)
    )
    if not rec.started:
        return [], st
    episode = f"{rec.run_id}:{rec.launches}"
    text = render_train(rec)
    found: list[Action] = []
    if rec.phase == "crashed":
        head = f":rotating_light: Training CRASHED: {_reason(rec)}"
        found.append(Action("alert", f"{head}\n{text}", key=f"{TRAIN_KEY}crashed:{episode}", resume=True))
    if rec.nan_loss:
        head = f":rotating_light: Training loss is NaN at step {rec.step}"
        found.append(Action("alert", f"{head}\n{text}", key=f"{TRAIN_KEY}nan:{episode}"))
    if rec.loss == 0 and rec.acc == 0 and rec.step:
        if rec.step not in st.train_zero_steps:
            st.train_zero_steps = (st.train_zero_steps + [rec.step])[-ZERO_LOGS:]
    elif rec.step and (rec.loss is not None or rec.acc is not None):
        st.train_zero_steps = []
    if len(st.train_zero_steps) >= ZERO_LOGS:
        head = (
            f":rotating_light: Training loss and acc both 0 over {ZERO_LOGS} logs (steps "
            f"{', '.join(map(str, st.train_zero_steps))}): the loss mask is likely empty"
        )
        found.append(Action("alert", f"{head}\n{text}", key=f"{TRAIN_KEY}zero:{episode}"))
    if rec.phase == "done":
        where = rec.export_dir or "the export dir"
        body = (
            f":white_check_mark: Training done\n{text}\nexport: `/train export` writes the draft to {where}"
        )
        found.append(Action("done", body, key=f"{TRAIN_KEY}done:{rec.run_id}:{rec.ended_at}"))
    out = [a for a in found if a.key not in st.train_active]
    st.train_active = (st.train_active + [a.key for a in out])[-MAX_KEYS:]
    return out, st


def watch_training(box, st) -> tuple[list[Action], object]:
    """One look at the training record; a box that cannot say is the extraction's alert to give."""
    try:
        rec = box.train_status()
    except RemoteError as e:
        log.warning("could not read the training record: %s", e)
        return [], st
    return judge(st, rec)
