"""The worker process's side: read commands, run them on a Runner, reply.

Started by :class:`precsearch.study.worker.Worker` as ``python -m
precsearch.engine.serve``. Messages are JSON lines, one dataclass each
(:mod:`precsearch.records.messages`): commands on stdin, one reply to each on the file
descriptor named by ``PRECSEARCH_REPLY_FD`` (a line that is not a command gets an error
reply too). ``init`` builds the :class:`~precsearch.engine.runner.Runner`
(:func:`start_runner`); every other command runs on it through its handler in
:data:`HANDLERS` (:func:`dispatch`). The in-process executor
(:class:`precsearch.study.executors.InProcess`) builds its Runner itself and hands its
commands to the same :func:`dispatch`. This process's own stdout is pointed at stderr so
that a model file's ``print`` cannot garble the replies. The process exits when its
stdin ends or its parent dies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from precsearch.engine.guarded import classify, run_guarded
from precsearch.errors import PrecsearchError, UserInputError
from precsearch.policy import Policy
from precsearch.records.messages import (
    Command,
    ConfirmCommand,
    ConfirmReply,
    ErrorReply,
    ExportCommand,
    ExportReply,
    InitCommand,
    InitReply,
    NumericsCommand,
    NumericsReply,
    Reply,
    TrialCommand,
    TrialReply,
    read_command,
)

if TYPE_CHECKING:
    from precsearch.engine.runner import Runner

__all__ = ["HANDLERS", "dispatch", "main"]

_R = TypeVar("_R", bound=Reply)


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


def start_runner(command: InitCommand) -> tuple[Runner, InitReply]:
    """The Runner of the model file ``command`` names, and the reply saying it is ready."""
    t0 = time.perf_counter()
    from precsearch.backend import import_backend

    import_backend()  # timed on its own: the import split

    t_import = time.perf_counter() - t0
    from precsearch.engine.runner import Runner
    from precsearch.plugins import create

    t0 = time.perf_counter()
    runner = Runner(
        create("loader", command.loader).load(command.model_file),
        work_dir=command.work_dir,
        budget=command.budget,
        fidelity=command.fidelity,
        batch_size=command.batch_size,
        strategy=command.strategy,
    )
    ready = InitReply(import_s=t_import, setup_s=time.perf_counter() - t0, model_info=runner.info)
    return runner, ready


def _policy(data: dict[str, Any] | None) -> Policy | None:
    return Policy.from_dict(data) if data else None


def _trial(runner: Runner, command: TrialCommand) -> TrialReply:
    result = run_guarded(runner, _policy(command.policy), command.budget, command.peer)
    return TrialReply(result=result)


def _confirm(runner: Runner, command: ConfirmCommand) -> ConfirmReply:
    from precsearch.engine.measure import measure

    configs = [(label, _policy(data)) for label, data in command.configs]
    return ConfirmReply(measurement=measure(runner, configs, command.orders, command.block))


def _numerics(runner: Runner, command: NumericsCommand) -> NumericsReply:
    from precsearch.engine.batch_numerics import batch_numerics

    configs = [(label, Policy.from_dict(data)) for label, data in command.configs]
    return NumericsReply(by_label=batch_numerics(runner.problem, configs))


def _export(runner: Runner, command: ExportCommand) -> ExportReply:
    policy = Policy.from_dict(command.policy)
    return ExportReply(**runner.export(policy, command.exporters, command.directory))


# Each command that runs on a Runner, and its handler: a new command is a command and a
# reply class in precsearch.records.messages and a line here.
HANDLERS: dict[type[Command[Any]], Callable[[Runner, Any], Reply]] = {
    TrialCommand: _trial,
    ConfirmCommand: _confirm,
    NumericsCommand: _numerics,
    ExportCommand: _export,
}


def dispatch(runner: Runner, command: Command[_R]) -> _R:
    """The reply to a command on ``runner``, from its handler in :data:`HANDLERS`.

    Raises:
        PrecsearchError: No handler runs this command on a Runner (``init`` makes one).
    """
    handler = HANDLERS.get(type(command))
    if handler is None:
        raise PrecsearchError(f"{command.cmd} does not run on a started worker")
    return handler(runner, command)  # type: ignore[return-value]


def main() -> None:
    """The worker's loop: ``init``, then one command at a time until stdin ends."""
    _die_with_parent()
    replies = os.fdopen(int(os.environ["PRECSEARCH_REPLY_FD"]), "w", buffering=1)
    os.dup2(2, 1)  # a model file's print() must not garble the replies

    def reply(message: Reply | ErrorReply) -> None:
        replies.write(message.to_line())
        replies.flush()

    runner: Runner | None = None
    for line in sys.stdin:
        try:
            command = read_command(line)
            if isinstance(command, InitCommand):
                runner, ready = start_runner(command)
                reply(ready)
            elif runner is None:
                raise PrecsearchError(f"{command.cmd} before init")
            else:
                reply(dispatch(runner, command))
        except UserInputError as exc:
            reply(ErrorReply(error="user_input", message=str(exc)))
        except PrecsearchError as exc:
            reply(ErrorReply(error="failed", message=str(exc)))
        except Exception as exc:
            reason, detail = classify(exc)
            reply(ErrorReply(error="failed", message=f"{reason}: {detail}"))


if __name__ == "__main__":
    main()
