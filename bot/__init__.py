"""The ops side, in rooms: ``verbs`` (the kinds table, the parser, the gate and each kind's verbs),
``slack`` (the Slack app, its endpoint and listeners), ``watch`` (the watcher and its judges),
``render`` (Block Kit, charts, escaping), ``terminal`` (the console); ``cli`` (`hsx`) and
``wiring`` (the objects built from a config) stand at the top, as every room's user."""
