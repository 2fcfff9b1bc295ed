"""Slack: the bolt app, its signed HTTP endpoint, the listeners, replies as messages, events acted on once."""
