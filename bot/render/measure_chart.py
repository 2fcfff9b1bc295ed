"""`/measure chart`: the draft's measurement as one PNG, from its record alone (every figure in it
was computed from results.jsonl on the box): the measured accept length per setting beside the
training's simulated one (SGLang's units both), each setting's accept histogram, and tokens/s with
and without the draft. ``figure()`` draws it; ``caption()`` says it in a line."""

from __future__ import annotations

from bot.render.chart import new_figure, png
from runner.contract.measure import NONE, MeasureRecord
from runner.text.measure import accept_line, speed_line


def drafted(rec: MeasureRecord) -> list[dict]:
    """The speculative settings with a measured accept length, in the record's order."""
    return [s for s in rec.settings if s.get("setting") != NONE and s.get("accept_length") is not None]


def enough(rec: MeasureRecord) -> bool:
    """Something to draw: a setting with the draft measured."""
    return bool(drafted(rec))


def title(rec: MeasureRecord) -> str:
    done = f" — {rec.done:,} / {rec.total:,} requests" if rec.total else ""
    return f"hsx: the draft measured in SGLang{done} ({rec.phase.replace('_', ' ')})"


def caption(rec: MeasureRecord) -> str:
    bits = [title(rec)] + [b for b in (accept_line(rec), speed_line(rec)) if b]
    return "\n".join(bits)


def figure(rec: MeasureRecord):
    """The matplotlib Figure (not drawn): tests read its bars and lines."""
    fig = new_figure((11, 4.2))
    ax_len, ax_hist, ax_rate = fig.subplots(1, 3)
    spec = drafted(rec)
    names = [s["setting"] for s in spec]
    bars = ax_len.bar(names, [s["accept_length"] for s in spec], color="tab:purple", gid="accept_length")
    ax_len.bar_label(bars, fmt="%.2f", fontsize=8)
    if rec.simulated is not None:
        ax_len.axhline(rec.simulated, color="tab:gray", ls="--", lw=1.2, gid="simulated",
                       label=f"simulated {rec.simulated:.2f} (training)")  # fmt: skip
        ax_len.legend(loc="lower right", fontsize=7)
    top = max([s["accept_length"] for s in spec] + [rec.simulated or 1.0])
    ax_len.set_ylim(0, top * 1.2)
    ax_len.set_title("accept length, measured (SGLang's units)", fontsize=9)
    ax_len.set_xlabel("STEPS/TOPK/DRAFT_TOKENS", fontsize=8)

    width = 0.8 / max(1, len(spec))
    for i, s in enumerate(spec):
        h = s.get("histogram") or []
        total = sum(h) or 1
        xs = [k + i * width for k in range(len(h))]
        ax_hist.bar(xs, [n / total for n in h], width, label=s["setting"], gid=f"histogram:{s['setting']}")
    ax_hist.set_title("verify steps by drafts accepted", fontsize=9)
    ax_hist.set_xlabel("drafts accepted in a verify step", fontsize=8)
    ax_hist.set_ylabel("share of verify steps", fontsize=8)
    if any(s.get("histogram") for s in spec):
        ax_hist.legend(fontsize=7)

    rated = [s for s in rec.settings if s.get("tokens_per_s")]
    names = ["target alone" if s["setting"] == NONE else s["setting"] for s in rated]
    colours = ["tab:gray" if s["setting"] == NONE else "tab:green" for s in rated]
    bars = ax_rate.bar(names, [s["tokens_per_s"] for s in rated], color=colours, gid="tokens_per_s")
    ax_rate.bar_label(
        bars, labels=[f"{s['speedup']:.2f}×" if s.get("speedup") else "" for s in rated], fontsize=8
    )
    ax_rate.set_title("tokens/s (× the target alone)", fontsize=9)
    for a in (ax_len, ax_rate):
        a.tick_params(axis="x", labelsize=8)
    fig.suptitle(title(rec), x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return fig


def render_png(rec: MeasureRecord) -> bytes:
    return png(figure(rec))
