"""The worker process's side: read commands, run them on a Runner, reply.

Started by :class:`precsearch.study.executors.Worker` as ``python -m
precsearch.engine.serve``. Messages are JSON lines: commands (``init``, ``trial``,
``confirm``, ``numerics``, ``export``) on stdin, one reply to each on the file descriptor named by
``PRECSEARCH_REPLY_FD`` (a line that is not a command gets an error reply too). This
process's own stdout is pointed at stderr so that a model file's ``print`` cannot garble
the replies. The process exits when its stdin ends or its parent dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

from precsearch.engine.guarded import classify, run_guarded
from precsearch.errors import PrecsearchError, UserInputError
from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity

__all__ = ["COMMANDS", "main"]

COMMANDS = ("init", "trial", "confirm", "numerics", "export")


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    # The parent may have died before prctl took effect.
    if os.getppid() == 1:
        os._exit(1)


def _init(message: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    t0 = time.perf_counter()
    from precsearch.engine.problem import import_tensorflow

    import_tensorflow()  # timed on its own: the import split

    t_import = time.perf_counter() - t0
    from precsearch.engine.runner import Runner
    from precsearch.plugins import create

    t0 = time.perf_counter()
    runner = Runner(
        create("loader", message["loader"]).load(message["model_file"]),
        work_dir=message["work_dir"],
        budget=Budget(**message["budget"]),
        fidelity=Fidelity(**message["fidelity"]),
        batch_size=message["batch_size"],
        strategy=message.get("strategy", "none"),
    )
    ready = {
        "ready": True,
        "import": t_import,
        "setup": time.perf_counter() - t0,
        "model_info": runner.info.to_dict(),
    }
    return runner, ready


def _command(runner: Any, message: dict[str, Any]) -> dict[str, Any]:
    """The reply to one command after ``init``."""
    cmd = message["cmd"]
    if cmd == "trial":
        policy = Policy.from_dict(message["policy"]) if message["policy"] else None
        budget = Budget(**message["budget"])
        return {"result": run_guarded(runner, policy, budget, message.get("peer")).to_dict()}
    if cmd == "confirm":
        from precsearch.engine.measure import measure

        configs = [(label, Policy.from_dict(p) if p else None) for label, p in message["configs"]]
        return {"value": measure(runner, configs, message["orders"], message["block"]).to_dict()}
    if cmd == "numerics":
        from precsearch.engine.probe import numerics

        configs = [(label, Policy.from_dict(p)) for label, p in message["configs"]]
        return {"value": numerics(runner, configs)}
    if cmd == "export":
        policy = Policy.from_dict(message["policy"])
        return {"value": runner.export(policy, message["exporters"], message["directory"])}
    raise PrecsearchError(f"unknown command {cmd!r} (expected {', '.join(COMMANDS)})")


def main() -> None:
    """The worker's loop: ``init``, then one command at a time until stdin ends."""
    _die_with_parent()
    replies = os.fdopen(int(os.environ["PRECSEARCH_REPLY_FD"]), "w", buffering=1)
    os.dup2(2, 1)  # a model file's print() must not garble the replies

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message, allow_nan=False) + "\n")
        replies.flush()

    runner = None
    for line in sys.stdin:
        try:
            message = json.loads(line)
            if not isinstance(message, dict) or "cmd" not in message:
                raise PrecsearchError(f"not a command: {line.strip()[:80]!r}")
            if message["cmd"] == "init":
                runner, ready = _init(message)
                reply(ready)
            elif runner is None and message["cmd"] in COMMANDS:
                raise PrecsearchError(f"{message['cmd']} before init")
            else:
                reply(_command(runner, message))
        except UserInputError as exc:
            reply({"error": "user_input", "message": str(exc)})
        except PrecsearchError as exc:
            reply({"error": "failed", "message": str(exc)})
        except json.JSONDecodeError as exc:
            reply({"error": "failed", "message": f"not a JSON command ({exc})"})
        except Exception as exc:
            reason, detail = classify(exc)
            reply({"error": "failed", "message": f"{reason}: {detail}"})


if __name__ == "__main__":
    main()
