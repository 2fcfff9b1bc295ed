"""The terminal chat of `hsx demo`: the console and its watcher, on the same verbs as Slack."""
