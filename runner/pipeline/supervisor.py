"""The detached process that runs the pipeline: it holds the run's lock and takes the stages in
order. A stage done whose checks pass hands on to the next; one running (started by the stage
before it, or left by a pipeline that died) is waited on; one not started is started, one
stopped or crashed is resumed. A stage this launch started that then crashes (its supervisor
killed, its node gone) is resumed by the pipeline itself, up to ``[pipeline] max_resumes`` times,
each said in the record (``healed``); one that crashes again with no progress since, or past that
budget, or that ends otherwise, ends the pipeline with its reason: ``pipeline start`` again
resumes it there. SIGTERM stops the stage under way, then the pipeline.

``python -m runner.pipeline.supervisor RUN_DIR CONFIG``
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ..contract import timing
from ..contract.config import Config, load, require_job
from ..contract.status import Phase, now_iso
from ..output.lock import JobLock
from ..text.pipeline import progress
from . import record
from .stages import STAGES, WAIT, Stage

POLL_S = 2.0  # a stage's record read this often (the fast profile: its server poll)


class Pipeline:
    def __init__(self, root: str, config: str, stages: list[str]):
        self.root, self.config, self.stages = root, config, stages
        self.rec = record.KIND.load(root)
        self.stop_asked = False
        self.crashed_at: dict[str, str] = {}  # each stage's progress at its last crash

    def _heal(self, cfg: Config, st: Stage, d: dict) -> str | None:
        """None once the crashed stage is to be resumed (said in the record); else why not."""
        resumes = dict(self.rec.d.get("resumes") or {})
        n, budget = resumes.get(st.name, 0), cfg.pipeline.max_resumes
        at = progress(st.name, d) or "its start"
        if n >= budget:
            return f" (resumed {n} of {budget} times already)" if budget else " ([pipeline] max_resumes = 0)"
        if self.crashed_at.get(st.name) == at:
            return f" (again at {at}, with no progress since its resume)"
        self.crashed_at[st.name] = at
        resumes[st.name] = n + 1
        said = f"{st.name} crashed at {at}, resumed {n + 1} of {budget}"
        self.rec.update(resumes=resumes, healed=[*(self.rec.d.get("healed") or []), said])
        self.rec.write()
        return None

    def on_term(self, *_) -> None:
        self.stop_asked = True

    def _sleep(self) -> None:
        end = time.monotonic() + min(POLL_S, timing.current().server_poll_s * 4)
        while time.monotonic() < end and not self.stop_asked:
            time.sleep(timing.current().stop_poll_s)

    def _cfg(self) -> Config:
        """hsx.toml as it is now: an edit between two polls counts, as it did for the CLI."""
        cfg = load(self.config)
        require_job(cfg)
        return cfg

    def _stage(self, st: Stage) -> str | None:
        """None once the stage is done and handed on; else how the pipeline ends."""
        launched = False
        while True:
            cfg = self._cfg()
            d = st.status(cfg)
            phase = d.get("phase")
            if self.stop_asked:
                if phase in (p.value for p in Phase if p.is_active()):
                    st.ask(cfg, "stop")
                return "stopped"
            if phase == "done":
                why = st.check(d)
                if why == WAIT:
                    self._sleep()
                    continue
                if why:
                    self.rec.update(reason=f"the {st.name} stage ended done, but {why}")
                    return "failed"
                self.rec.update(handed=[*self.rec.d.get("handed", []), f"{st.name}: {st.said(d)}"])
                return None
            if phase in (p.value for p in Phase if p.is_active()):
                self._sleep()
                continue
            why = (self._heal(cfg, st, d) if phase == "crashed" else "") if launched else None
            if why is not None:
                self.rec.update(reason=f"the {st.name} stage {phase}: {d.get('reason') or '?'}{why}")
                return "stopped" if phase == "stopped" else "failed"
            action = "resume" if st.started(d) else "start"
            code, r = st.ask(cfg, action)
            if code and action == "resume":  # killed before it kept anything (the extraction's "use start")
                again, r2 = st.ask(self._cfg(), "start")
                if not again:
                    action, code, r = "start", again, r2
            if code and st.status(self._cfg()).get("phase") not in (p.value for p in Phase if p.is_active()):
                self.rec.update(
                    reason=f"the {st.name} stage's {action} refused: {r.get('reason') or r.get('message')}"
                )
                return "failed"
            launched = True
            self.rec.update(reason="")
            self.rec.write()

    def run(self) -> str:
        for name in self.stages:
            self.rec.update(phase="running", stage=name)
            self.rec.write()
            end = self._stage(STAGES[name])
            self.rec.write()
            if end:
                return end
        return "done"


def run(argv: list[str]) -> int:
    root, config = os.path.abspath(argv[0]), argv[1]
    lock = JobLock(os.path.join(root, ".lock"))
    lock.acquire()  # LockedError: another supervisor runs this pipeline
    cfg = load(config)
    p = Pipeline(root, config, list(cfg.pipeline.stages))
    signal.signal(signal.SIGTERM, p.on_term)
    signal.signal(signal.SIGINT, p.on_term)
    p.rec.update(phase="preflight", pid=os.getpid(), reason="", stages=list(cfg.pipeline.stages), handed=[],
                 healed=[], resumes={}, started_at=p.rec.d.get("started_at") or now_iso(), ended_at=None)  # fmt: skip
    p.rec.write()
    try:
        end = p.run()
    except Exception as e:  # noqa: BLE001 - said in the record: the reason the pipeline ends
        end = "failed"
        p.rec.update(reason=f"{type(e).__name__}: {str(e)[:500]}")
    if end == "stopped" and not p.rec.d.get("reason"):
        p.rec.update(reason="stopped on request")
    p.rec.update(phase=end, ended_at=now_iso())
    p.rec.write()
    lock.release()
    return 0 if end != "failed" else 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
