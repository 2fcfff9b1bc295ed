"""``hsx-runner train setup|start|resume|stop|status|export|history``: each answers a Reply.

start refuses a run dir that holds checkpoints (SpecForge's fresh start deletes them) and
deletes nothing; resume reuses the first launch's run.yaml unchanged and adds only
``training.resume_from=<the last complete checkpoint's dir>``, and only when there is one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from ..contract import timing
from ..contract.atomic import write_atomic
from ..contract.checks import refusal
from ..contract.config import Config
from ..contract.errors import BrokenFileError, ConfigError
from ..contract.replies import NOT_OK, OK, REFUSED, Reply
from ..job import detach, rundir, supervised
from ..lanes import BuildError, building
from ..output.lock import is_held_at
from ..text.training import simulated
from . import exclusive, guard, interpreter, preflight, progress, runspec, strays
from .history import read as history_of
from .history import reset as reset_history
from .record import Record, now, read

VERSION = "0.2.0"
AFTER = "after-extraction"  # the action that arranges a start at the extraction's end
ARRANGED = "train-after-extraction.json"  # in the job's out, taken by the hand-off once
DID = {"start": "started", "resume": "resumed"}
# The unified runtime has specforge.cli with a ``train`` command; the legacy 0.2.0 has neither.
CHECK = """
import contextlib, importlib.metadata as m, io, specforge.cli as c
print(m.version("specforge"))
code = 1
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        c.main(["train", "--help"])
    except SystemExit as e:
        code = e.code
print(code == 0)
"""


def refused(why: str, **kw) -> Reply:
    return Reply({"started": False, "reason": why, **kw}, why, REFUSED)


def check_python(python: str) -> str | None:
    """Why ``python`` cannot train (None: its specforge is the 0.2.0 unified runtime)."""
    if not python:
        return "[train] python is not set (hsx-runner train setup builds one)"
    try:
        p = subprocess.run([python, "-c", CHECK], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python} does not run ({e})"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{python} has no SpecForge unified runtime (specforge.cli): {last}"
    version, has_train = (p.stdout.split() + ["", ""])[:2]
    if version != VERSION:
        return f"{python} has specforge {version}, hsx trains with {VERSION}"
    if has_train != "True":
        return f"{python}'s specforge {version} is the legacy one: its specforge.cli has no train entry"
    return None


def setup(cfg: Config, root: str | None) -> Reply:
    """Build ``[train] python``'s lane when it names one (``auto`` does), then check it. Unset:
    build this box's lane under ``root`` and say what to set."""
    envs = cfg.train.envs_dir or None  # where "auto" builds
    python = cfg.train.python or interpreter.resolve(interpreter.AUTO, root or envs)
    if why := _ensure(python):
        return Reply({"ok": False, "python": python, "reason": why}, f"setup failed: {why}", NOT_OK)
    why = check_python(python)
    if why:
        return Reply({"ok": False, "python": python, "reason": why}, f"refused: {why}", NOT_OK)
    lane = interpreter.lane_of(python)
    said = f" ({lane.LANE.title})" if lane else ""
    text = f"specforge {VERSION} ready: {python}{said}"
    if not cfg.train.python:  # "auto" names what was built, unless --root put it elsewhere
        named = not root or python == interpreter.resolve(interpreter.AUTO, envs)
        text += f"; set [train] python = {json.dumps(interpreter.AUTO if named else python)}"
    return Reply({"ok": True, "python": python, "version": VERSION}, text)


def running(paths: runspec.RunPaths) -> int | None:
    held, pid = is_held_at(paths.lock)
    return pid if held else None


def _launch(cfg: Config, paths: runspec.RunPaths, launch: str, submit=None) -> Reply:
    """Record the launch and start its supervisor here, or hand it to ``submit`` (the Slurm
    engine's job, whose batch script is the supervisor)."""
    rec = Record.load(paths.root)
    rec.update(phase="preflight", launch=launch, launches=(rec.d.get("launches") or 0) + 1, reason="",
               run_dir=paths.root, export_dir=runspec.export_dir(cfg), python=cfg.train.python,
               heartbeat=now(), pid=None, features=os.path.abspath(cfg.job.out),
               config=os.path.abspath(cfg.path) if cfg.path else None, export=None, export_ok=None)  # fmt: skip
    rec.write()
    if submit:
        return submit(cfg, paths, launch)
    argv = [sys.executable, "-m", "runner.train.supervisor", paths.root]
    p = detach.spawn(argv, os.path.join(paths.root, "supervisor.log"))
    claimed = detach.wait_claim(
        p, lambda: Record.load(paths.root).d.get("supervisor_pid") == p.pid, timing.current().claim_s
    )
    if claimed is None:
        return Reply(
            {"started": True, "supervisor_pid": p.pid, "run_dir": paths.root}, f"training {DID[launch]}"
        )
    if claimed:
        pid = read(paths.root).get("pid")
        text = f"training {DID[launch]} (trainer pid {pid}); log {paths.log}"
        return Reply({"started": True, "pid": pid, "supervisor_pid": p.pid, "run_dir": paths.root}, text)
    if reply := _going(paths):  # another start's supervisor won the lock: its record stands
        return reply
    if p.returncode == exclusive.REFUSED_RC:  # the output was taken since the check
        return refused(read(paths.root)["reason"])
    rec.update(phase="crashed", reason=f"the supervisor exited with code {p.returncode} at once; "
               f"see {paths.root}/supervisor.log")  # fmt: skip
    rec.write()
    return Reply({"started": False, "reason": rec.d["reason"]}, rec.d["reason"], REFUSED)


def _ensure(python: str) -> str | None:
    """Build the lane ``python`` names on its first use; why it could not, else None."""
    try:
        interpreter.ensure(python)
    except BuildError as e:
        return str(e)
    return None


def _going(paths: runspec.RunPaths) -> Reply | None:
    """The refusal while a training run holds the run dir (None: none does)."""
    if (pid := running(paths)) is not None:
        return refused(f"a training run is going in {paths.root} (supervisor pid {pid})")
    return None


def locked(root: str, fn) -> Reply:
    """``fn()`` under the run's launch lock (every kind's, ``supervised.one_launch``): a start,
    resume or export at a time, so a second resume's stray-killing and checkpoint choice never
    race the first's launch; the second then finds the first's run going and is refused."""
    with supervised.one_launch(root):
        return fn()


def _idle(cfg: Config) -> runspec.RunPaths | Reply:
    """The run's paths when hsx may write there and no run is going, else the refusal."""
    try:
        paths = runspec.owned(cfg)
    except ConfigError as e:
        return refused(str(e))
    if reply := _going(paths):
        return reply
    return paths


def _cheap(cfg: Config, extraction) -> runspec.RunPaths | Reply:
    """The run's paths, or the refusal that costs a few file reads, answered before any venv is
    built. A start asked while the extraction runs is offered the start at its end
    (``after-extraction``)."""
    paths = _idle(cfg)
    if isinstance(paths, Reply):
        return paths
    if why := exclusive.why_not_train(cfg.job.out, extraction):
        if exclusive.extracting(cfg.job.out, extraction):
            return refused(f"{why}; or have it start by itself when the extraction ends: "
                           f"hsx-runner train {AFTER} (`/train {AFTER}`)", offer=AFTER)  # fmt: skip
        return refused(why)
    return paths


def _existing(path: str) -> str:
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def _trusted(cfg: Config, paths: runspec.RunPaths) -> Reply | None:
    """Build the interpreter on its first use, then check it and what root runs from: the
    interpreter, its venv and the run dir."""
    if why := _ensure(cfg.train.python):
        return refused(why)
    python = shutil.which(cfg.train.python) or cfg.train.python
    for path, what in ((python, "[train] python"), (os.path.dirname(os.path.dirname(python)), "its venv"),
                       (_existing(paths.root), "[train] run_dir")):  # fmt: skip
        if why := guard.trusted(path, what):  # before root runs it, even to ask its version
            return refused(why)
    if why := check_python(cfg.train.python):
        return refused(why)
    return None


def _fit(cfg: Config, paths: runspec.RunPaths, spec: dict, draft=None, broken: str = "") -> Reply | None:
    """The interpreter built and trusted, then the preflight for ``spec``; ``broken``: the
    run.yaml it was read from, named when a key hsx wrote there is gone or of another kind."""
    if reply := _trusted(cfg, paths):
        return reply
    try:
        found = preflight.checks(cfg, spec, draft)
    except ConfigError as e:
        return refused(str(e))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if not broken:
            raise
        raise BrokenFileError(broken, f"{type(e).__name__}: {str(e)[:200]}", YAML_FIX) from None
    if why := refusal("training preflight", found):
        return refused(why, checks=found)
    return None


def start(cfg: Config, submit=None, extraction=None) -> Reply:
    """``submit``/``extraction``: the Slurm engine's launch and its merged extraction phase."""
    paths = _cheap(cfg, extraction)
    if isinstance(paths, Reply):
        return paths
    run_id = Record.load(paths.root).d.get("run_id") or runspec.RUN_ID
    held = progress.checkpoints(paths.output, run_id)  # a run cut short before its first save: none
    if held:
        return refused(
            f"{paths.root} holds checkpoints ({', '.join(f'step {s}' for s in held)}): "
            "a fresh start would delete them; resume it (hsx-runner train resume) or set another [train] run_dir"
        )
    if not runspec.feature_files(cfg.job.out):
        return refused(f"no feature files under {cfg.job.out}: extract first")
    try:
        _, spec, draft = runspec.plan(cfg)  # refuses the keys hsx owns before anything is written
    except ConfigError as e:
        return refused(str(e))
    if not (fit := preflight.features(cfg.job.out))["ok"]:
        return refused(refusal("training preflight", [fit]), checks=[fit])
    if reply := _fit(cfg, paths, spec, draft):
        return reply
    rundir.claim(cfg, "train")  # every check passed: the folder is hsx's run dir from here
    return locked(paths.root, lambda: _first(cfg, paths, submit))


def _first(cfg: Config, paths: runspec.RunPaths, submit) -> Reply:
    if reply := _going(paths):  # another start won the lock before us
        return reply
    try:
        paths, spec = runspec.prepare(cfg)
    except ConfigError as e:
        return refused(str(e))
    files = runspec.feature_files(spec["data"]["hidden_states_path"])  # with eval: the training files only
    total = runspec.total_steps(spec, files)
    world = runspec.world(spec)
    epochs = int(spec["training"]["num_epochs"])
    cmd = runspec.command(cfg, paths, None)
    write_atomic(paths.command, json.dumps(cmd, indent=1) + "\n", 0o644)
    rec = Record(paths.root, {})
    rec.update(total_steps=total, epochs=epochs, steps_per_epoch=max(1, total // epochs), world=world,
               output_dir=paths.output, run_id=spec.get("run_id", runspec.RUN_ID), started_at=now(),
               checkpoint_step=None, step=0, log_interval=int(spec["training"]["log_interval"]),
               eval_samples=cfg.train.eval_samples)  # fmt: skip
    rec.write()
    reset_history(paths.root)
    return _launch(cfg, paths, "start", submit)


def resume(cfg: Config, submit=None, extraction=None) -> Reply:
    paths = _cheap(cfg, extraction)
    if isinstance(paths, Reply):
        return paths
    d = read(paths.root)
    if not os.path.exists(paths.yaml) or d.get("run_id") is None:
        return refused(f"nothing to resume in {paths.root}: start it first (hsx-runner train start)")
    if d.get("phase") == "done":
        return refused(f"the training in {paths.root} is done; export it (hsx-runner train export)")
    spec = _run_yaml(paths)
    return locked(paths.root, lambda: _again(cfg, paths, spec, submit))


def _again(cfg: Config, paths: runspec.RunPaths, spec: dict, submit) -> Reply:
    """Under the launch lock: no one else launches, so what is left of a killed launch can be
    ended and the checkpoint chosen without killing a new trainer."""
    if reply := _going(paths):
        return reply
    d = read(paths.root)
    strays.end(paths.root)  # before the checkpoint is chosen: a leftover rank may rotate it away
    ckpt = progress.durable(d["output_dir"], d["run_id"], d.get("world") or 1, set())
    if ckpt is None:
        return refused(f"no complete checkpoint in {d['output_dir']}: nothing to resume from")
    if reply := _fit(cfg, paths, spec, broken=paths.yaml):
        return reply
    cmd = runspec.command(cfg, paths, progress.step_dir(d["output_dir"], d["run_id"], ckpt))
    write_atomic(paths.command, json.dumps(cmd, indent=1) + "\n", 0o644)
    return _launch(cfg, paths, "resume", submit)


def after_extraction(cfg: Config, extraction=None) -> Reply:
    """``train after-extraction``: the start arranged for the extraction's end (once), when it
    ends done and its features verify: what ``[train] after_extraction`` does for every run."""
    if cfg.train.after_extraction:
        text = "[train] after_extraction is set: the training starts when the extraction ends"
        return Reply({"arranged": True, "message": text}, text)
    paths = _idle(cfg)
    if isinstance(paths, Reply):
        return paths
    if not exclusive.extracting(cfg.job.out, extraction):
        return refused("the extraction is not running: `/train start` starts the training now")
    write_atomic(os.path.join(cfg.job.out, ARRANGED), json.dumps({"at": now()}) + "\n", 0o644)
    text = ("arranged: the training starts by itself when the extraction ends done and its features "
            "verify; the extraction's done message says so")  # fmt: skip
    return Reply({"arranged": True, "message": text}, text)


def arranged(out: str) -> bool:
    """Take the arranged start (True once per arrangement)."""
    try:
        os.unlink(os.path.join(out, ARRANGED))
    except FileNotFoundError:
        return False
    return True


YAML_FIX = ("hsx wrote it at the run's start and a resume reuses it unchanged: restore it, or move the run dir "
            "aside and start a fresh run (hsx-runner train start)")  # fmt: skip


def _run_yaml(paths: runspec.RunPaths) -> dict:
    """The first launch's run.yaml (JSON, which YAML reads); BrokenFileError when it is not an object."""
    try:
        with open(paths.yaml, "rb") as f:
            spec = json.loads(f.read())
    except OSError as e:
        raise BrokenFileError(paths.yaml, f"it cannot be read ({e})", YAML_FIX) from None
    except (ValueError, RecursionError) as e:
        raise BrokenFileError(paths.yaml, f"it is not valid JSON ({str(e)[:200]})", YAML_FIX) from None
    if not isinstance(spec, dict):
        raise BrokenFileError(paths.yaml, f"it holds a JSON {type(spec).__name__}, not an object", YAML_FIX)
    for key in ("model", "data", "training", "deployment"):  # the tables hsx wrote
        if not isinstance(spec.get(key), dict):
            raise BrokenFileError(paths.yaml, f"its {key!r} is not the table hsx wrote", YAML_FIX)
    return spec


def stop(cfg: Config, wait: float) -> Reply:
    paths = runspec.RunPaths(runspec.run_dir(cfg))
    pid = running(paths)
    if pid is None:
        return Reply(
            {"stopped": False, "reason": "no training run is going"}, "no training run is going", REFUSED
        )
    gone = detach.stop(pid, lambda: running(paths) is not None, wait)
    d = read(paths.root)
    text = (
        d.get("reason") or "stopped" if gone else f"asked the supervisor (pid {pid}) to stop; still stopping"
    )
    return Reply({"stopped": True, "done": gone, "phase": d.get("phase"), "checkpoint_step": d.get("checkpoint_step")},
                 text)  # fmt: skip


def _blocks(path: str) -> int:
    """Bytes the files under ``path`` take on disk, as du counts them; links count nothing (the
    features/ and eval/ trees are links to the output) and a checkpoint rotated away meanwhile
    is simply not counted."""
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    total += _blocks(e.path)
                elif e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_blocks * 512
    except OSError:
        pass
    return total


def disk(root: str) -> dict:
    """The run dir's disk use, its filesystem's free bytes and mount point ({} before it exists)."""
    if not os.path.isdir(root):
        return {}
    mount = os.path.realpath(root)
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    return {"run_bytes": _blocks(root), "disk_free": shutil.disk_usage(root).free, "disk_path": mount}


def _acc(d: dict) -> str:
    """The draft's top-1 acc as render_train says it: the running mean, from where it started once
    logged, else the last batch's (a record from before the mean was kept)."""
    acc = d["acc_mean"] if d.get("acc_mean") is not None else d.get("acc")
    if acc is None:
        return ""
    start = f" (from {100 * d['acc_start']:.1f}%)" if d.get("acc_start") is not None else ""
    return f"acc {100 * acc:.1f}%{start}"


def status(cfg: Config, rec: dict | None = None) -> Reply:
    """``rec``: the record as read (the Slurm engine's, with Slurm's word on a launch that waits)."""
    root = runspec.run_dir(cfg)
    d = {**(read(root) if rec is None else rec), **disk(root)}
    if cfg.train.python:  # a first start building the trainer's venv says which step it is at
        d["building"] = building(os.path.dirname(os.path.dirname(os.path.abspath(cfg.train.python))))
    d.setdefault("run_dir", root)
    d["run_dir"] = d["run_dir"] or root
    d["export_dir"] = d["export_dir"] or runspec.export_dir(cfg)
    d["python"] = d["python"] or cfg.train.python
    step = f"step {d['step']}/{d['total_steps']}" if d.get("total_steps") else ""
    bits = [d["phase"], step, f"loss {d['loss']:.4g}" if d.get("loss") is not None else "",
            _acc(d),
            f"val acc {d['val_acc']:.3g}" if d.get("val_acc") is not None else "",
            simulated(d["acc_len"]) if d.get("acc_len") is not None else "",
            f"checkpoint step {d['checkpoint_step']}" if d.get("checkpoint_step") is not None else "",
            d.get("reason") or ""]  # fmt: skip
    return Reply(d, " · ".join(b for b in bits if b), OK)


def history(cfg: Config) -> Reply:
    """The run's curve: logged steps, evals, launch and end marks (runner/train/history.py)."""
    root = runspec.run_dir(cfg)
    h = history_of(root, read(root))
    text = f"{len(h['points'])} logged steps, {len(h['evals'])} evals, {len(h['marks'])} marks in {root}"
    return Reply(h, text, OK)
