"""The one escaping of text for Slack's `text` and mrkdwn fields.

Text from the GPU box (a reason, a server error, a unit name) or typed by a user is data:
`<!channel>` in it must show as those characters, not ping the channel. Slack's rule: `&`,
`<` and `>` become entities; nothing else is special. hsx's own markup (a mention of an
operator, the audit line) is added after, unescaped.
"""

from __future__ import annotations

import re


def escape(text: str, limit: int | None = None) -> str:
    """text with & < > as entities; cut to limit characters without splitting an entity."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if limit is None or len(out) <= limit:
        return out
    cut = out[:limit]
    amp = cut.rfind("&", max(0, limit - 4))  # "&amp;" is the longest: 5 characters
    return cut[:amp] if amp >= 0 and ";" not in cut[amp:] else cut


# Slack's shortcodes hsx writes, as a terminal shows them (`hsx demo`'s console).
EMOJI = {
    "arrows_counterclockwise": "🔄", "bar_chart": "📊", "black_square_for_stop": "⏹️", "boom": "💥",
    "double_vertical_bar": "⏸️", "hourglass_flowing_sand": "⏳", "mag": "🔍", "rotating_light": "🚨",
    "test_tube": "🧪", "warning": "⚠️", "white_check_mark": "✅", "x": "❌",
}  # fmt: skip
_SHORTCODE_RE = re.compile(r":([a-z_]+):")


def for_terminal(text: str) -> str:
    """text with hsx's shortcodes as emoji; any other :word: is left as it is."""
    return _SHORTCODE_RE.sub(lambda m: EMOJI.get(m[1], m[0]), text)
