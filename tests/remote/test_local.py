"""The local transport (the GPU box is this machine): a real child, and what it is given."""

from __future__ import annotations

import sys

from remote.transport import LocalTransport


def test_the_local_transport_hands_no_slack_secret_to_the_runner(monkeypatch):
    """The bot's tokens live in its environment; hsx-runner, and every process it starts
    (SGLang, a model's own tokenizer code), is not given them."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-secret")
    monkeypatch.setenv("HSX_KEPT", "yes")
    show = "import os; print('\\n'.join(sorted(os.environ)))"
    names = LocalTransport().run([sys.executable, "-c", show], 60).stdout.split()
    assert "HSX_KEPT" in names and "PATH" in names
    assert [n for n in names if n.startswith("SLACK_")] == [], names
