"""Measuring the exported draft where it will serve: the real SGLang, the target alone and then
with the draft at each speculative setting, each on a fresh server, on the same prompts.

``plan`` (the prompts, fixed at the start), ``results`` (results.jsonl: a line per request, whole,
exactly once; the figures computed from it), ``supervisor`` (the detached process that measures), ``control`` (the ``hsx-runner measure``
verbs). Imports the contract, ``serve`` (the server's lifecycle, and ``serve.plain``: each
setting's command line), ``data`` (the dataset's rows and the tokenizer) and ``train`` (the
draft's export dir and simulated figure).
"""
