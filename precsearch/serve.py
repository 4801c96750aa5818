"""The worker process's side: read commands, run them on a Runner, reply.

Started by :class:`precsearch.worker.Worker` as ``python -m precsearch.serve``. Messages
are JSON lines: commands (``init``, ``trial``, ``confirm``, ``export``) on stdin, replies
on the file descriptor named by ``PRECSEARCH_REPLY_FD``; this process's own stdout is
pointed at stderr so that a model file's ``print`` cannot garble the replies. The
process exits when its stdin ends or its parent dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

from precsearch.errors import PrecsearchError, UserInputError
from precsearch.guard import classify, run_guarded
from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity

__all__ = ["main"]


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


def main() -> None:
    """The worker's loop: init, then one trial per command until stdin ends."""
    _die_with_parent()
    replies = os.fdopen(int(os.environ["PRECSEARCH_REPLY_FD"]), "w", buffering=1)
    os.dup2(2, 1)  # a model file's print() must not garble the replies

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message, allow_nan=False) + "\n")
        replies.flush()

    runner = None
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if message["cmd"] == "init":
                t0 = time.perf_counter()
                from precsearch.problem import import_tensorflow

                import_tensorflow()  # timed on its own: the import split

                t_import = time.perf_counter() - t0
                from precsearch.plugins import create
                from precsearch.runner import Runner

                t0 = time.perf_counter()
                runner = Runner(
                    create("loader", message["loader"]).load(message["model_file"]),
                    work_dir=message["work_dir"],
                    budget=Budget(**message["budget"]),
                    fidelity=Fidelity(**message["fidelity"]),
                    batch_size=message["batch_size"],
                    strategy=message.get("strategy", "none"),
                )
                reply(
                    {
                        "ready": True,
                        "import": t_import,
                        "setup": time.perf_counter() - t0,
                        "model_info": runner.info.to_dict(),
                    }
                )
            elif message["cmd"] == "confirm":
                assert runner is not None, "confirm before init"
                from precsearch.confirm import measure

                configs = [
                    (label, Policy.from_dict(p) if p else None) for label, p in message["configs"]
                ]
                value = measure(runner, configs, message["rounds"], message["block"])
                reply({"value": value.to_dict()})
            elif message["cmd"] == "export":
                assert runner is not None, "export before init"
                value = runner.export(
                    Policy.from_dict(message["policy"]), message["exporters"], message["directory"]
                )
                reply({"value": value})
            elif message["cmd"] == "trial":
                assert runner is not None, "trial before init"
                policy = Policy.from_dict(message["policy"]) if message["policy"] else None
                budget = Budget(**message["budget"])
                result = run_guarded(runner, policy, budget, message.get("peer"))
                reply({"result": result.to_dict()})
        except UserInputError as exc:
            reply({"error": "user_input", "message": str(exc)})
        except PrecsearchError as exc:
            reply({"error": "failed", "message": str(exc)})
        except Exception as exc:
            reason, detail = classify(exc)
            reply({"error": "failed", "message": f"{reason}: {detail}"})


if __name__ == "__main__":
    main()
