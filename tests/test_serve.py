"""The worker's loop answers every line it reads, a broken one too (engine/serve.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_every_line_gets_one_reply_and_the_worker_goes_on():
    lines = [
        "{not json",  # a garbled line
        json.dumps(["trial"]),  # JSON, but not a command
        json.dumps({"cmd": "trial", "policy": None, "budget": {}}),  # before init
        json.dumps({"cmd": "dance"}),  # a command no worker knows
    ]
    read, write = os.pipe()
    worker = subprocess.Popen(
        [sys.executable, "-m", "precsearch.engine.serve"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PRECSEARCH_REPLY_FD": str(write)},
        pass_fds=(write,),
        text=True,
    )
    os.close(write)
    _, err = worker.communicate("\n".join(lines) + "\n", timeout=120)
    with os.fdopen(read) as replies:
        got = [json.loads(line) for line in replies]
    assert worker.returncode == 0, err[-2000:]
    assert [reply.get("error") for reply in got] == ["failed"] * 4
    messages = [reply["message"] for reply in got]
    assert messages[0].startswith("not a JSON command")
    assert messages[1] == "not a command: '[\"trial\"]'"
    assert messages[2] == "trial before init"
    assert messages[3].startswith("unknown command 'dance' (expected init, trial,")
