"""Ops side: the Slack bot, the terminal console and the watcher, all over one renderer."""
