"""The one escaping of text for Slack's `text` and mrkdwn fields.

Text from the GPU box (a reason, a server error, a unit name) or typed by a user is data:
`<!channel>` in it must show as those characters, not ping the channel. Slack's rule: `&`,
`<` and `>` become entities; nothing else is special. hsx's own markup (a mention of an
operator, the audit line) is added after, unescaped.
"""

from __future__ import annotations


def escape(text: str, limit: int | None = None) -> str:
    """text with & < > as entities; cut to limit characters without splitting an entity."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if limit is None or len(out) <= limit:
        return out
    cut = out[:limit]
    amp = cut.rfind("&", max(0, limit - 4))  # "&amp;" is the longest: 5 characters
    return cut[:amp] if amp >= 0 and ";" not in cut[amp:] else cut
