"""What the watcher posts: an ``Action``, and the Resume button an alert may carry (its id is
what the Slack listeners answer, its value the alert's key, which names its kind)."""

from __future__ import annotations

from dataclasses import dataclass

RESUME = "hsx_resume"  # its value: the alert's key, which names its kind (verbs/table.kind_of_key)


@dataclass
class Action:
    """What the watcher posts."""

    kind: str  # progress | milestone | done | alert | recovered | result
    text: str  # what the channel may read
    key: str = ""
    resume: bool = False  # alert carries a Resume button
    blocks: list[dict] | None = None
    private: str = ""  # the text with paths and the trainer's words, when it differs: operators'


def resume_button(key: str) -> dict:
    return {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "action_id": RESUME,
                "style": "primary",
                "text": {"type": "plain_text", "text": "Resume"},
                "value": key[:2000],
            }
        ],
    }
