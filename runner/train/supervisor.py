"""The detached supervisor of one trainer launch: ``python -m runner.train.supervisor RUN_DIR``.

It holds the run dir's lock for the launch's life, starts ``command.json``'s argv in its own
process group with stdout and stderr appended to ``train.log``, reads the log's step lines
and the checkpoint folders into ``status.json``, and ends the record with the trainer's exit.

The trainer dies with the supervisor (PR_SET_PDEATHSIG, as the extraction's server does): a
supervisor gone by kill -9 then leaves no trainer running unwatched, and since SpecForge's
resume is exact from its last checkpoint, re-adopting a live trainer would buy only the steps
since that checkpoint, at the price of a second way for a run to be watched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from ..contract import timing
from ..contract.errors import StatusError
from ..contract.train import EXPORT_PENDING
from ..output.lock import JobLock
from ..procs import become_subreaper, die_with_parent, end_descendants
from . import exclusive, history, progress, strays
from .record import Record, now

POLL_S = 0.5
STOP_GRACE_S = 20.0  # SIGTERM to the trainer's group, then SIGKILL
REPLACE_S = 1.0  # status.json at most this often while steps flow
READ = 1 << 20  # bytes of train.log read at a time
BURST = 64  # reads at most per poll while the trainer runs
BAD_LINE_CHARS = 200  # what the record says of the last line it could not use
TAIL = 1 << 20  # the bytes of the log's end where a crash's traceback is looked for


def last_error(log_path: str, start: int) -> str:
    """The traceback's last line of this launch's log, else its last line."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - TAIL))
            lines = [ln.decode("utf-8", "replace").rstrip() for ln in f.read().splitlines()[-200:]]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback"):
            tail = lines[i + 1 :]
            frames = [j for j, ln in enumerate(tail) if ln.startswith("  File ")]
            after = tail[frames[-1] + 1 :] if frames else tail
            first = next((j for j, ln in enumerate(after) if not ln.startswith((" ", "\t"))), None)
            if first is not None:  # the exception's line and what it prints below it (pydantic's)
                return " ".join(ln.strip() for ln in after[first:])[:500]
    return lines[-1][:500] if lines else ""


class Supervisor:
    def __init__(self, root: str):
        self.root = root
        self.rec = Record.load(root)
        self.log = os.path.join(root, "train.log")
        self.synced: set[int] = set()
        self.stop_asked = False
        self.proc: subprocess.Popen | None = None
        self.hist: history.Writer | None = None
        self.steps = progress.StepLines()  # other ranks repeat each line
        self.last: tuple[int, float] | None = None  # this launch's last step line: (step, when seen)

    def _on_term(self, signum, _frame) -> None:
        self.stop_asked = True
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        lock = JobLock(os.path.join(self.root, ".lock"))
        lock.acquire()  # LockedError: another supervisor has the run
        try:
            use = exclusive.train(self.rec.d["features"], os.getpid(), self.root)
        except exclusive.Refused as e:
            self.rec.update(phase="stopped", reason=str(e), ended_at=now())
            self.rec.write()
            return exclusive.REFUSED_RC
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        with open(os.path.join(self.root, "command.json")) as f:
            cmd = json.load(f)
        self.hist = history.Writer(self.root, self.rec.d.get("launches") or 1)
        self.hist.add("launch", _resumes_at(cmd["argv"]), how=self.rec.d.get("launch", "start"))
        # Several ranks: SpecForge's launcher starts torchrun, and torchrun each rank, in sessions
        # of their own. As their subreaper this process finds them when the launcher dies, and
        # SIGTERM, not SIGKILL, at its own death lets the launcher end them itself.
        become_subreaper()
        strays.end(self.root)
        death = signal.SIGTERM if (self.rec.d.get("world") or 1) > 1 else signal.SIGKILL
        with open(self.log, "ab") as log:
            log.write(f"--- hsx: {self.rec.d.get('launch', 'start')} at {now()}\n".encode())
            log.flush()
            start = log.tell()
            self.steps = progress.StepLines(_lines_in(self.log, start) + 1)
            self.rec.update(phase="loading", supervisor_pid=os.getpid(), reason="", exit_code=None,
                            heartbeat=now(), launched_at=now(), log_s=None, bad_lines=0, bad_line=None)  # fmt: skip
            self.proc = subprocess.Popen(
                cmd["argv"], env={**os.environ, **cmd["env"]}, cwd=self.root, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=lambda: die_with_parent(death),
            )  # fmt: skip
        self.rec.update(pid=self.proc.pid)
        self.rec.write()
        rc = self._watch(start)
        end_descendants()  # a launcher killed by -9 leaves torchrun and its ranks: none go on
        self._finish(rc, start)
        self.hist.close()
        os.close(use)
        lock.release()
        return 0

    def _watch(self, offset: int) -> int:
        grace_until = None
        last_write = 0.0
        with open(self.log, "rb") as f:
            f.seek(offset)
            while True:
                rc = self.proc.poll()
                # a burst of output never sits whole in memory, nor holds up the heartbeat and a
                # stop; once the trainer has ended, the rest is read to its end
                for _ in range(BURST if rc is None else sys.maxsize):
                    if not (chunk := f.read(READ)):
                        break
                    self._steps(self.steps.take(chunk))
                self._checkpoint()
                self.rec.update(heartbeat=now())
                if rc is not None:
                    self._steps(self.steps.end())
                    return rc
                if time.monotonic() - last_write >= REPLACE_S:
                    self.rec.write()
                    last_write = time.monotonic()
                if self.stop_asked:
                    grace_until = grace_until or time.monotonic() + STOP_GRACE_S
                    if time.monotonic() > grace_until:
                        os.killpg(self.proc.pid, signal.SIGKILL)
                time.sleep(POLL_S)

    def _steps(self, found: list[tuple[int, dict]]) -> None:
        for step, m in found:
            self._step(step, m)
        if self.steps.bad != (self.rec.d.get("bad_lines") or 0):  # never the line itself: its number
            self.rec.update(
                bad_lines=self.steps.bad, bad_line=f"train.log {self.steps.bad_line}"[:BAD_LINE_CHARS]
            )

    def _step(self, step: int, m: dict) -> None:
        d = self.rec.d
        if progress.is_eval(m):
            self.rec.eval_line(step, m)
            self.hist.add("eval", step, val_acc=d["val_acc"], acc_len=d["acc_len"])
            return
        t = time.monotonic()
        if self.last is not None:  # the trainer's own clock, else ours (a poll's lines come at once)
            per = progress.number(m.get("perf/optimizer_step_time_s"))
            self.rec.update(log_s=per * (step - self.last[0]) if per is not None else t - self.last[1])
        self.last = (step, t)
        self.rec.step_line(step, m)
        self.hist.add("step", step, loss=d["loss"], acc=d["acc"])

    def _durable(self) -> int | None:
        d = self.rec.d
        return progress.durable(d["output_dir"], d["run_id"], d.get("world", 1), self.synced)

    def _checkpoint(self) -> int | None:
        """The last durable checkpoint into the record, with when it first became so."""
        ckpt = self._durable()
        if ckpt != self.rec.d.get("checkpoint_step"):
            self.rec.update(checkpoint_step=ckpt, checkpoint_at=now() if ckpt is not None else None)
        return ckpt

    def _finish(self, rc: int, start: int) -> None:
        ckpt = self._checkpoint()
        at = (
            f"; the last complete checkpoint is step {ckpt}"
            if ckpt is not None
            else "; no complete checkpoint"
        )
        if rc == 0:  # every step ran; the last is logged only when log_interval divides it
            phase, reason = "done", ""
            self.rec.update(step=self.rec.d.get("total_steps") or self.rec.d.get("step"))
            self.rec.update(**self._export())
            if self.rec.d.get("export_ok"):
                self.rec.update(**self._measure())
        elif self.stop_asked:
            phase, reason = "stopped", f"stopped on request (SpecForge saves nothing on a stop){at}"
        elif rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
            phase, reason = "crashed", f"the trainer was killed by signal {-rc} ({name}){at}"
        else:
            why = last_error(self.log, start) or "no output"
            phase, reason = "crashed", f"the trainer exited with code {rc}: {why}{at}"
        self.rec.update(phase=phase, reason=reason, exit_code=rc, heartbeat=now(), ended_at=now())
        self.hist.add(phase, self.rec.d.get("step"))  # before the record ends: no reader sees an end unmarked
        self.rec.write()

    def _export(self) -> dict:
        """The draft exported for SGLang at the end (exporter.export_run, as ``train export``
        does, with this run's config): what the record says of it. A failure is said, never
        raised: the training is done either way, and ``train export`` tries again."""
        from ..contract.config import load
        from . import exporter, runspec

        path = self.rec.d.get("config")
        if not path:
            return {"export": None, "export_ok": None}
        try:
            cfg = load(path)
            if not cfg.train.export_at_end:
                return {"export": None, "export_ok": None}
            cfg.train.python = self.rec.d.get("python") or cfg.train.python  # as resolved at the launch
            self.rec.update(export=EXPORT_PENDING)
            self.rec.write()  # "done" waits for the draft: the record says it is being exported
            rep = exporter.export_run(cfg, runspec.RunPaths(self.root), self.rec.d)
            return {"export": rep.text, "export_ok": bool(rep.obj.get("ok")), "export_dir": rep.obj.get("export_dir")
                    or self.rec.d.get("export_dir")}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - said in the record; the run stays done
            return {"export": f"export failed: {type(e).__name__}: {e}", "export_ok": False}

    def _measure(self) -> dict:
        """[train] measure_at_end: the exported draft measured where it serves, started as
        ``hsx-runner measure start`` run by name (the measurement sits above the training, which
        never imports it): what came of it, said, never raised."""
        from ..contract.config import load

        path = self.rec.d.get("config")
        try:
            cfg = load(path) if path else None
            if cfg is None or not cfg.train.measure_at_end:
                return {}
            if cfg.cluster.engine == "slurm":
                return {"measure": "the measurement is one box's: `/measure start` on a box that serves SGLang",
                        "measure_ok": False}  # fmt: skip
            argv = [sys.executable, "-m", "runner.cli", "measure", "start", "--json", "--config", path]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timing.current().claim_s + 120)
            try:
                said = json.loads(p.stdout)
            except ValueError:
                said = {"message": (p.stderr or p.stdout).strip()[-500:] or f"exit code {p.returncode}"}
            ok = p.returncode == 0 and bool(said.get("started"))
            why = said.get("message") or said.get("reason") or ""
            return {"measure": f"measurement {'started' if ok else 'not started'} (measure_at_end): {why}",
                    "measure_ok": ok}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - said in the record; the run stays done
            return {"measure": f"measurement not started (measure_at_end): {type(e).__name__}: {e}",
                    "measure_ok": False}  # fmt: skip


def _lines_in(path: str, end: int) -> int:
    """The newlines in the log's first ``end`` bytes: a bad line is named by its number there."""
    n = 0
    with open(path, "rb") as f:
        while end > 0 and (chunk := f.read(min(READ, end))):
            n, end = n + chunk.count(b"\n"), end - len(chunk)
    return n


def _resumes_at(argv: list[str]) -> int | None:
    """The checkpoint step a launch goes on from (``training.resume_from=...-stepN``), else None:
    the chart's resume mark is there, not at the last step the crashed launch logged."""
    for a in argv:
        if a.startswith("training.resume_from="):
            m = progress.CKPT_RE.search(a.rstrip("/"))
            return int(m.group(1)) if m else None
    return None


def main(argv: list[str]) -> int:
    root = os.path.abspath(argv[0])
    try:
        phase = Record.load(root).d.get("phase")
    except StatusError as e:
        print(f"runner.train.supervisor: {e}", file=sys.stderr)
        return 2
    if phase != "preflight":  # control wrote the launch before us
        print(f"runner.train.supervisor: {root} has no launch waiting", file=sys.stderr)
        return 2
    return Supervisor(root).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
