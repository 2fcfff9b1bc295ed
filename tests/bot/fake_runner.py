"""Stands in for `hsx-runner <verb> --json --config F` on the GPU box.

The fixture folder is the folder of F. Every call appends its argv to ``argv.jsonl`` there;
the reply is ``<verb>.json`` (``status.json`` for status, ``train-<action>.json`` for train,
``measure-<action>.json`` for measure, ``regenerate-<action>.json`` for regenerate,
``pipeline-<action>.json`` for pipeline), the exit code ``<verb>.code``, and ``<verb>.sleep``
(seconds) makes it slow.
A file that is not JSON is printed as is (a corrupt reply).
"""

import json
import os
import sys
import time


def main() -> int:
    argv = sys.argv[1:]
    if "--config" not in argv:
        print("fake runner: --config is required", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(argv[argv.index("--config") + 1]))
    with open(os.path.join(folder, "argv.jsonl"), "a") as f:
        f.write(json.dumps(argv) + "\n")
    verb = argv[0]
    if verb in ("train", "measure", "regenerate", "pipeline"):  # `train ... ACTION`: train-ACTION.json
        verb = f"{verb}-{argv[-1]}"
    slow = os.path.join(folder, f"{verb}.sleep")
    if os.path.exists(slow):
        time.sleep(float(open(slow).read()))
    path = os.path.join(folder, f"{verb}.json")
    if "--free-gpus" in argv and os.path.exists(os.path.join(folder, "free-gpus.json")):
        path = os.path.join(folder, "free-gpus.json")  # what preflight --free-gpus answers
    if os.path.exists(path):
        with open(path) as f:
            sys.stdout.write(f.read())
    elif verb == "logs":
        n = int(argv[argv.index("-n") + 1])
        print(json.dumps({"lines": [f"log line {i}" for i in range(n)]}))
    elif verb == "events":
        print(json.dumps({"events": []}))
    else:
        print(json.dumps({"ok": True, "message": f"{verb} accepted"}))
    code_path = os.path.join(folder, f"{verb}.code")
    return int(open(code_path).read()) if os.path.exists(code_path) else 0


if __name__ == "__main__":
    sys.exit(main())
