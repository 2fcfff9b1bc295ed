"""The watcher's judging of the pipeline (``hsx-runner pipeline status``), apart from the kinds
it runs: each stage is still judged by its own kind's judge where that one is on.

Alerts, each posted once per episode: a crash (the pipeline's supervisor gone: one per launch,
by its pid) or a failure (a stage that ended otherwise, a done stage whose checks failed), with
the reason for operators and a Resume button that runs `/pipeline start`: it resumes where the
pipeline stopped, finished work kept.
Milestones, in the progress message's thread: each stage as it starts ("stage 2 of 4: extract"),
once per run; each crashed stage the pipeline resumed itself ("extract crashed at …, resumed 1 of
3"), once; done once, with what each stage handed on (the last: the measured accept length, where
measure is a stage), the paths only in the operators' DM.

Inside a pipeline, its stage's crash or failure is the pipeline's to say (``fold``): one alert,
with the pipeline's Resume, never the stage's own beside it.
"""

from __future__ import annotations

import copy
import datetime as dt

from bot.verbs.audit import without_paths
from bot.verbs.table import KINDS, PIPELINE, kind_of_key
from bot.watch import standing
from bot.watch.action import Action
from bot.watch.posted import MAX_KEYS, Posted
from runner.contract.status import parse_iso
from runner.text.pipeline import render_pipeline

KEY = PIPELINE.key


def _alert(d: dict) -> Action:
    phase = d["phase"]
    head = f":rotating_light: Pipeline {phase.upper()}"
    text = f"{head}\n{render_pipeline(d, full=False)}"
    private = f"{head}: {d.get('reason') or 'no reason given'}\n{render_pipeline(d)}"
    return Action("alert", text, key=standing.ended_key(PIPELINE, d), resume=True, private=private)


def _started(d: dict, p: Posted, run: str) -> Action | None:
    """The stage under way, when it is a later one than any said of this run: a resume walks the
    done stages again, and a watcher that came late says where the pipeline is."""
    stages, stage = d.get("stages") or [], d.get("stage")
    if d.get("phase") != "running" or stage not in stages:
        return None
    k = stages.index(stage) + 1
    if k <= p.milestone:
        return None
    p.milestone = k
    text = f"Pipeline stage {k} of {len(stages)}: {stage}"
    handed = d.get("handed") or []
    if k > 1 and len(handed) == k - 1:  # the stage before it, handed on just now
        text += f"\nhanded on: {without_paths(handed[-1])}"
    return Action("milestone", text, key=f"{KEY}stage:{run}:{k}")


def _healed(d: dict, run: str) -> list[Action]:
    """Each resume of a crashed stage by the pipeline itself, once: keyed by its launch and place."""
    return [
        Action("milestone", f"Pipeline: {said}", key=f"{KEY}healed:{run}:{d.get('pid')}:{i}")
        for i, said in enumerate(d.get("healed") or [])
    ]


def _done(d: dict, run: str) -> Action:
    head = ":white_check_mark: Pipeline done: " + " → ".join(d.get("stages") or [])
    handed = d.get("handed") or []
    text = "\n".join([head, *(without_paths(h) for h in handed)])
    private = "\n".join([head, *handed])
    return Action("done", text, key=f"{KEY}done:{run}", private=private if private != text else "")


def judge(st, d: dict, now: dt.datetime | None = None):
    """Pure: the watcher's state (the pipeline's part) and one status reply → what to post, next
    state."""
    st = copy.deepcopy(st)
    if not d.get("started_at"):
        return [], st
    p = st.kinds.setdefault(PIPELINE.name, Posted())
    run = d["started_at"]  # kept by a start that resumes: the run's milestones are said once
    p.start(run)
    found = []
    if d.get("phase") in ("crashed", "failed"):
        found.append(_alert(d))
    if d.get("phase") == "done":
        found.append(_done(d, run))
    later = [a] if (a := _started(d, p, run)) else []
    out = [a for a in found + later + _healed(d, run) if a.key not in p.active]
    p.active = (p.active + [a.key for a in out if a not in later])[-MAX_KEYS:]
    return out, st


def _beat(rec) -> dt.datetime | None:
    """A stage record's last heartbeat (the extraction's is heartbeat_at)."""
    d = rec.to_dict()
    return parse_iso(d.get("heartbeat") or d.get("heartbeat_at"))


def fold(actions: list[Action], seen: dict) -> list[Action]:
    """``actions`` less the crash or failure alert of the stage a pipeline runs, or ended at: the
    pipeline heals a crash itself, and its own alert (one Resume: ``/pipeline start``) says the
    rest. A stage run again by hand after the pipeline ended (its heartbeat later) says its own."""
    d = seen.get(PIPELINE.name)
    if not d or d.get("phase") not in ("running", "crashed", "failed"):
        return actions
    kind = next((k for k in KINDS.values() if k.stage and k.stage == d.get("stage")), None)
    rec = seen.get(kind.name) if kind else None
    if kind is None or rec is None:
        return actions
    if d["phase"] != "running":
        ended, beat = parse_iso(d.get("ended_at") or d.get("heartbeat")), _beat(rec)
        if ended and beat and beat > ended:
            return actions
    return [a for a in actions if not (kind_of_key(a.key) is kind and _ended(a.key.removeprefix(kind.key)))]


def _ended(key: str) -> bool:
    """A kind's crash or failure alert, by its key (``crashed:…``, ``train:crashed:…``): not its
    stall or its stale heartbeat, which a pipeline waits through and does not see."""
    return key.startswith(("crashed:", "failed:"))
