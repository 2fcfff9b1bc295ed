"""The records' plain text, the same on the box and the ops side: ``extraction`` (the status
record and the verbs' reports), ``training`` (the training's record), ``measure``, ``regenerate``,
``pipeline`` (each its kind's record), ``human`` (times, sizes, durations).

Imports only the standard library and the contract, so bot and remote may import it.
"""
