"""`/train chart`: the history the box prints (`hsx-runner train history --json`) checked by name,
and what the picture says, read from the figure's artists and text, not pixels."""

from __future__ import annotations

import math

import pytest

from bot.render import train_chart
from runner.contract.errors import StatusError
from runner.contract.train import TrainRecord
from runner.contract.train_history import parse_history

from ..verbs.test_train_chat import TRAINING


def loss_at(step: int) -> float:
    return round(1.9 + 3.6 * math.exp(-step / 30), 4)


def acc_at(step: int) -> float:
    return round(0.45 * (1 - math.exp(-step / 35)), 4)


def _mean(steps) -> float:
    return sum(acc_at(s) for s in steps) / len(steps)


def _loss(steps) -> float:
    steps = list(steps)
    return sum(loss_at(s) for s in steps) / len(steps)


def a_history() -> dict:
    """As the box prints it for a 120-step run, log_interval 5, eval every 20, save every 20: the
    first launch is killed after its step-65 log (last checkpoint: 60), the second resumes from
    60, logs 65 again (SpecForge's resume is exact) and ends; one logged loss was nan (null)."""
    points = [{"step": s, "loss": loss_at(s), "acc": acc_at(s), "launch": 1} for s in range(5, 70, 5)]
    points[5]["loss"] = None  # step 30
    points += [{"step": s, "loss": loss_at(s), "acc": acc_at(s), "launch": 2} for s in range(65, 125, 5)]
    evals = [
        {"step": 20, "val_acc": 0.21, "acc_len": 1.41, "launch": 1},
        {"step": 40, "val_acc": 0.33, "acc_len": 1.72, "launch": 1},
        {"step": 60, "val_acc": 0.38, "acc_len": 1.86, "launch": 1},
        {"step": 80, "val_acc": 0.41, "acc_len": 1.95, "launch": 2},
        {"step": 100, "val_acc": 0.43, "acc_len": 1.99, "launch": 2},
        {"step": 120, "val_acc": 0.42, "acc_len": 1.97, "launch": 2},
    ]
    marks = [
        {"step": 65, "kind": "crashed", "launch": 1},
        {"step": 65, "kind": "resumed", "launch": 2},
        {"step": 120, "kind": "done", "launch": 2},
    ]
    return {"points": points, "evals": evals, "marks": marks, "capped": False}


DONE = {**TRAINING, "phase": "done", "step": 120, "launches": 2, "launch": "resume", "run_id": "hsx",
        "val_acc": 0.42, "acc_len": 1.97, "eval_step": 120, "best_acc_len": 1.99, "best_step": 100}  # fmt: skip


def test_the_history_is_checked_by_name():
    h = parse_history(a_history())
    assert len(h["points"]) == 25 and h["points"][5] == {
        "step": 30,
        "loss": None,
        "acc": acc_at(30),
        "launch": 1,
    }
    assert parse_history({"points": [{"step": 5, "loss": float("nan")}]})["points"][0]["loss"] is None
    assert parse_history({"points": []}) == {"points": [], "evals": [], "marks": []}
    for bad, why in (
        ([], "is not a JSON object"),
        ({"evals": []}, "has no 'points' list"),
        ({"points": {}}, "'points' is not a list"),
        ({"points": [{"loss": 1.0}]}, "point 0 has no 'step'"),
        ({"points": [{"step": "5"}]}, "point 0 field 'step' is not an integer"),
        ({"points": [], "evals": [{"step": 5, "acc_len": "2"}]}, "eval 0 field 'acc_len' is not a number"),
        ({"points": [], "marks": [{"step": 5, "kind": "exploded"}]}, "mark 0 has unknown kind 'exploded'"),
        ({"points": [], "marks": [{"step": 5}]}, "mark 0 has no 'kind'"),
    ):
        with pytest.raises(StatusError, match=why):
            parse_history(bad)


def test_a_realistic_history_tells_its_story():
    s = train_chart.story(parse_history(a_history()), TrainRecord.from_dict(DONE))
    assert [len(run) for run in s.launches] == [13, 12]  # a line per launch: no line back from 65 to 65
    assert [m.kind for m in s.marks] == ["crashed", "resumed", "done"]  # the record's end is already marked
    assert s.best == train_chart.Eval(100, None, 2.99)  # SpecForge's 1.99 in SGLang's units
    assert train_chart.title(s) == "hsx: step 120 / 120 (100.0%) — done"
    assert train_chart.caption(s) == (
        f"hsx: step 120 / 120 (100.0%) — done · loss {_loss((5, 10, 15, 20, 25, 35, 40, 45, 50, 55)):.3g} → "
        f"{_loss(range(75, 125, 5)):.3g}, acc {_mean(range(5, 55, 5)):.3f} → {_mean(range(75, 125, 5)):.3f} "
        "(each the mean of the first and the last 10 logged) over steps 5 → 120"
        " · eval at step 120: val acc 42.0%, simulated accept length ~2.97 (best ~2.99 at step 100)"
        " · 1 crash, 1 resume"
    )


def test_the_figure_draws_loss_acc_evals_and_marks():
    s = train_chart.story(parse_history(a_history()), TrainRecord.from_dict(DONE))
    fig = train_chart.figure(s)
    ax, ax_acc, ax_len = fig.axes
    lines = {ln.get_gid(): ln for a in fig.axes for ln in a.get_lines() if ln.get_gid()}
    assert list(lines["loss:0"].get_xdata()) == list(range(5, 70, 5))
    assert math.isnan(lines["loss:0"].get_ydata()[5])  # the nan step is a gap, not a zero
    assert list(lines["loss:1"].get_xdata()) == list(range(65, 125, 5))
    assert lines["acc:1"].get_ydata()[-1] == acc_at(120)
    # one batch's acc is noise: beside it, each point's mean over the last 10 logged (within a launch)
    mean = lines["acc_mean:1"].get_ydata()
    assert mean[-1] == pytest.approx(_mean(range(75, 125, 5))) and mean[0] == acc_at(65)
    assert lines["acc_mean:0"].get_ydata()[1] == pytest.approx(_mean((5, 10)))
    # the loss too: its logged batches faint, their mean of the last 10 bold (the nan step left out)
    assert lines["loss_mean:1"].get_ydata()[-1] == pytest.approx(_loss(range(75, 125, 5)))
    assert lines["loss_mean:0"].get_ydata()[6] == pytest.approx(_loss((5, 10, 15, 20, 25, 35)))
    assert list(lines["val_acc"].get_ydata()) == [0.21, 0.33, 0.38, 0.41, 0.43, 0.42]
    assert list(lines["acc_len"].get_xdata()) == [20, 40, 60, 80, 100, 120]
    assert (list(lines["best"].get_xdata()), list(lines["best"].get_ydata())) == ([100], [2.99])
    marks = [(g, list(ln.get_xdata())[0]) for g, ln in lines.items() if g.startswith("mark:")]
    assert marks == [("mark:crashed", 65), ("mark:resumed", 65), ("mark:done", 120)]
    assert [t.get_text() for t in ax.texts] == ["crash", "resume", "done"]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels[:3] == ["loss (logged batch)", "loss (mean of the last 10)", "_loss"]
    assert "total 120 steps" in labels
    assert [ln.get_label() for ln in ax_len.get_lines()] == [
        "accept length (simulated)",
        "best ~2.99 at step 100",
    ]
    assert ax.get_title(loc="left") == "hsx: step 120 / 120 (100.0%) — done"
    assert ax_acc.get_xlabel() == "step" and ax_acc.get_ylabel() == "acc" and ax.get_ylabel() == "loss"
    assert train_chart.render_png(s).startswith(b"\x89PNG")


def test_a_crash_the_box_could_not_write_is_marked_from_the_record_and_no_eval_draws_none():
    """A supervisor killed with its trainer writes no end: the record's crashed says it."""
    h = {"points": [{"step": s, "loss": loss_at(s), "acc": acc_at(s), "launch": 1} for s in (5, 10, 15)]}
    crashed = {**TRAINING, "phase": "crashed", "step": 15, "launches": 1, "total_steps": 120}
    s = train_chart.story(parse_history(h), TrainRecord.from_dict(crashed))
    assert s.marks == [train_chart.Mark("crashed", 15, 1)] and s.best is None
    fig = train_chart.figure(s)
    assert len(fig.axes) == 2  # no eval: no acceptance-length axis
    gids = [ln.get_gid() for a in fig.axes for ln in a.get_lines()]
    assert "val_acc" not in gids and "mark:crashed" in gids
    assert train_chart.caption(s) == (
        f"hsx: step 15 / 120 (12.5%) — crashed · loss {_loss((5, 10, 15)):.3g} → {_loss((5, 10, 15)):.3g}, "
        f"acc {_mean((5, 10, 15)):.3f} → {_mean((5, 10, 15)):.3f} (each the mean of the first and the last 10 "
        "logged) over steps 5 → 15"
        " · 1 crash"
    )
