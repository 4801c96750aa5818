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


def test_each_command_and_reply_crosses_as_json_and_each_command_has_one_handler():
    from precsearch import Policy
    from precsearch.engine.serve import HANDLERS
    from precsearch.records import Budget, Fidelity, Measurement, TrialResult
    from precsearch.records import messages as m

    bf16 = Policy(default="mixed_bfloat16").to_dict()
    exchanges = [
        (
            m.InitCommand("model.py", "model_file", "work", Budget(steps=20), Fidelity(), 64),
            m.ErrorReply(error="user_input", message="model.py: no build_model()"),
        ),
        (
            m.TrialCommand(policy=bf16, budget=Budget(steps=20, stop_below=1.2)),
            m.TrialReply(result=TrialResult(policy=bf16, status="ok", speedup=1.5)),
        ),
        (
            m.ConfirmCommand(
                configs=[("c0", bf16), ("graph_rewrite", None)], orders=[["c0"]], block=2
            ),
            m.ConfirmReply(measurement=Measurement(rates={"c0": [10.0]}, steps={"c0": 2})),
        ),
        (
            m.NumericsCommand(configs=[("bf16", bf16)]),
            m.NumericsReply(by_label={"bf16": {"loss_error": None, "layer": "dense"}}),
        ),
        (
            m.ExportCommand(policy=bf16, exporters=["saved_model"], directory="out"),
            m.ExportReply(paths=["out/saved_model"], steps=30, final_loss=0.25),
        ),
    ]
    for command, reply in exchanges:
        line = command.to_line()
        assert json.loads(line)["cmd"] == command.cmd and line.endswith("\n")
        assert m.read_command(line) == command
        assert command.read_reply(reply.to_line()) == reply
    assert {type(command) for command, _ in exchanges} == set(m.COMMANDS.values())
    # init makes the Runner; every other command is one handler in the worker's table.
    assert set(HANDLERS) == set(m.COMMANDS.values()) - {m.InitCommand}
