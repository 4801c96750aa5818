"""The worker process an executor runs trials in, so that no trial can take the study down.

The study process (which never imports TensorFlow) starts ``python -m
precsearch.engine.serve``; that worker imports TensorFlow once, builds a
:class:`~precsearch.engine.runner.Runner` for the model file (keeping one traced FP32
model of the user's training for timing), answers with the model's
:class:`~precsearch.records.ModelInfo`, and runs commands sent to it one at a time as JSON
lines (:mod:`precsearch.records.messages`). Its output goes to a file whose last lines
explain a crash (with ``debug``, to this process's stderr, TensorFlow's logs included).

Whatever happens to a trial comes back as a :class:`~precsearch.records.TrialResult`:
a worker that dies (segfault, ``os.abort``, killed for memory) fails that trial with the
signal and its last stderr lines, and a fresh worker takes the next one; a trial past its
wall-clock timeout has its worker killed (``failed: timeout``). A worker whose parent
dies, even by ``kill -9``, exits too (parent-death signal on Linux, and end of stdin).
"""

from __future__ import annotations

import abc
import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, TypeVar

from precsearch.errors import TrialFailed, UserInputError
from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity, Measurement, ModelInfo, TrialResult
from precsearch.records.messages import (
    Command,
    ConfirmCommand,
    ErrorReply,
    ExportCommand,
    InitCommand,
    NumericsCommand,
    Reply,
    TrialCommand,
)

__all__ = ["CommandExecutor", "Worker"]

READY_TIMEOUT = 600.0

_R = TypeVar("_R", bound=Reply)


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class CommandExecutor(abc.ABC):
    """An executor's methods, each one command (:mod:`precsearch.records.messages`) and
    its reply; a subclass says how a command is answered (:meth:`answer`). Each method
    raises what :meth:`answer` raises."""

    @abc.abstractmethod
    def answer(self, command: Command[_R], timeout: float | None = None) -> _R:
        """The reply to ``command``, within ``timeout`` seconds where that can be kept.

        Raises:
            UserInputError: The model file is broken.
            TrialFailed: The command failed (or the worker died or timed out).
        """

    @staticmethod
    def trial_command(
        policy: Policy | None, budget: Budget | None, peer: str | None
    ) -> TrialCommand:
        """The command of one trial (``budget`` ``None``: the executor's own)."""
        return TrialCommand(policy=policy.to_dict() if policy else None, budget=budget, peer=peer)

    def confirm(
        self,
        configs: list[tuple[str, Policy | None]],
        orders: list[list[str]],
        block: int,
        timeout: float | None = None,
    ) -> Measurement:
        """Timed rounds of labelled configurations (:func:`precsearch.engine.measure.measure`)."""
        pairs = [(label, p.to_dict() if p else None) for label, p in configs]
        command = ConfirmCommand(configs=pairs, orders=orders, block=block)
        return self.answer(command, timeout).measurement

    def numerics(
        self, configs: list[tuple[str, Policy]], timeout: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """One batch's numbers under each policy against FP32's
        (:func:`precsearch.engine.batch_numerics.batch_numerics`)."""
        command = NumericsCommand(configs=[(label, p.to_dict()) for label, p in configs])
        return self.answer(command, timeout).by_label

    def export(
        self,
        policy: Policy,
        exporters: list[str],
        directory: str | os.PathLike[str],
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Train under ``policy`` for the budget and run model exporters on the result
        (:meth:`Runner.export <precsearch.engine.runner.Runner.export>`):
        ``{"paths": [...], "steps", "final_loss"}``; it fails where the loss goes
        non-finite."""
        command = ExportCommand(
            policy=policy.to_dict(), exporters=list(exporters), directory=str(directory)
        )
        return self.answer(command, timeout).to_dict()


class Worker(CommandExecutor):
    """A worker process for one model file, restarted whenever it dies.

    Args:
        model_file: Path of the model file (callables cannot cross a process).
        work_dir: Shared cache of the model info, initial weights and FP32 references.
        budget: Default budget of each trial.
        fidelity: Feasibility settings.
        batch_size: The model's own batch size (default from the model file).
        trial_timeout: Wall-clock seconds a trial may take before its worker is killed.
        env: Extra environment variables for the worker.
        loader: The loader plugin (``NAME`` or ``NAME=ARG``) that reads ``model_file``.
        strategy: ``"none"`` or ``"mirrored"``: data-parallel trials over the GPUs.
        max_growth: Restart the worker after a trial once its resident memory has grown
            by more than this share since its first trial (TensorFlow keeps a little of
            every traced step; see :mod:`precsearch.engine.memory`).
        debug: Show the worker's output, TensorFlow's logs included, on this process's
            stderr. Otherwise it is kept for the message of a crash, and TensorFlow's
            start-up notices and warnings are left out (``TF_CPP_MIN_LOG_LEVEL=2``)
            unless the environment or ``env`` sets a level.
    """

    def __init__(
        self,
        model_file: str | os.PathLike[str],
        work_dir: str | os.PathLike[str],
        budget: Budget | None = None,
        fidelity: Fidelity | None = None,
        batch_size: int | None = None,
        trial_timeout: float = 1800.0,
        env: dict[str, str] | None = None,
        loader: str = "model_file",
        max_growth: float = 0.5,
        strategy: str = "none",
        debug: bool = False,
    ) -> None:
        self.loader = loader
        self.debug = debug
        self.strategy = strategy
        self.max_growth = max_growth
        self._first_rss: float | None = None
        self.model_file = str(Path(model_file).resolve())
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.budget = budget or Budget()
        self.fidelity = fidelity or Fidelity()
        self.batch_size = batch_size
        self.trial_timeout = trial_timeout
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._replies: IO[bytes] | None = None
        self._start_split: dict[str, float] = {}
        self.started = 0
        self.trials_in_process = 0
        self.model_info: ModelInfo | None = None

    @property
    def pid(self) -> int | None:
        """The worker's process id, while one runs."""
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict[str, float]:
        """Start a worker (if none runs) and wait until it has built the model.

        Returns:
            The start-up split: ``worker_start``, ``import``, ``setup`` seconds.

        Raises:
            UserInputError: The model file breaks the contract (it will for every trial).
            TrialFailed: The worker died or hung while starting.
        """
        if self.pid is not None:
            return {}
        t0 = time.perf_counter()
        read_fd, write_fd = os.pipe()
        if self._stderr is not None:
            self._stderr.close()
        # Kept open for the worker's life: its last lines explain a crash.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        env = {**os.environ, **self.env, "PRECSEARCH_REPLY_FD": str(write_fd)}
        if not self.debug:
            # TensorFlow's C++ start-up lines would land among the progress lines.
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # Under debug: the model file's prints and TensorFlow's logs on our stderr.
        output: Any = 2 if self.debug else self._stderr
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "precsearch.engine.serve"],
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=None if self.debug else output,
                pass_fds=(write_fd,),
                env=env,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._replies = os.fdopen(read_fd, "rb")
        self.started += 1
        self.trials_in_process = 0
        self._first_rss = None
        init = InitCommand(
            model_file=self.model_file,
            loader=self.loader,
            work_dir=str(self.work_dir),
            budget=self.budget,
            fidelity=self.fidelity,
            batch_size=self.batch_size,
            strategy=self.strategy,
        )
        self._send(init)
        reply = init.read_reply(self._receive(READY_TIMEOUT, "starting"))
        if isinstance(reply, ErrorReply):
            self.close()
            if reply.user_input:
                raise UserInputError(reply.message)
            raise TrialFailed("worker start failed", reply.message)
        self.model_info = reply.model_info
        total = time.perf_counter() - t0
        split = {"import": reply.import_s, "setup": reply.setup_s}
        split["worker_start"] = max(0.0, total - split["import"] - split["setup"])
        # Charged to the next trial, whoever started the worker.
        self._start_split = dict(split)
        return split

    def _send(self, command: Command[Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.to_line().encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died("sending to the worker") from None

    def _receive(self, timeout: float, doing: str) -> bytes:
        """The worker's next reply line."""
        assert self._replies is not None
        ready, _, _ = select.select([self._replies], [], [], timeout)
        if not ready:
            self.kill()
            raise TrialFailed("timeout", f"no answer after {timeout:g} s while {doing}")
        line = self._replies.readline()
        if not line:
            raise self._died(doing)
        return line

    def _died(self, doing: str) -> TrialFailed:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        how = _signal_name(code)
        reason = f"worker died ({how})"
        if code == -signal.SIGKILL:
            reason += " - killed, often by the kernel for lack of memory"
        detail = f"while {doing}; last stderr: {self.stderr_tail()}"
        self._cleanup()
        return TrialFailed(reason, detail)

    def stderr_tail(self, lines: int = 8) -> str:
        """The last lines the worker wrote to stderr (and stdout)."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 16384))
        text = self._stderr.read().decode(errors="replace")
        kept = [line for line in text.splitlines() if line.strip()]
        return " | ".join(kept[-lines:])

    def run_trial(
        self,
        policy: Policy | None,
        budget: Budget | None = None,
        timeout: float | None = None,
        peer: str | None = None,
    ) -> TrialResult:
        """Run one trial in the worker; never raises for what happens to the trial.

        Raises:
            UserInputError: The model file is broken (every trial would fail alike).
        """
        t0 = time.perf_counter()
        command = self.trial_command(policy, budget or self.budget, peer)
        try:
            self.start()
            split, self._start_split = self._start_split, {}
            reply = self._ask(command, timeout, "running a trial")
            if isinstance(reply, ErrorReply):
                if reply.user_input:
                    raise UserInputError(reply.message)
                raise TrialFailed("worker error", reply.message)
        except TrialFailed as exc:
            result = TrialResult.failed(policy or Policy(), exc.reason, exc.detail)
            result.timings["total"] = time.perf_counter() - t0
            return result
        result = reply.result
        result.timings.update(
            {key: split.get(key, 0.0) for key in ("worker_start", "import", "setup")}
        )
        result.timings["total"] = time.perf_counter() - t0
        result.numerics["worker_pid"] = self.proc.pid if self.proc else None
        result.numerics["worker_trial"] = self.trials_in_process
        self.trials_in_process += 1
        self._recycle_if_grown(result)
        return result

    def _recycle_if_grown(self, result: TrialResult) -> None:
        rss = result.numerics.get("rss_after_mb")
        if not rss:
            return
        if self._first_rss is None:
            self._first_rss = rss
        elif rss > self._first_rss * (1 + self.max_growth):
            # The next trial starts a fresh worker (FP32 references are cached on disk).
            result.numerics["worker_recycled"] = f"{self._first_rss:.0f} -> {rss:.0f} MiB"
            self.close()

    def answer(self, command: Command[_R], timeout: float | None = None) -> _R:
        """The worker's reply to ``command`` (starting it if none runs; ``timeout``
        defaults to the trial timeout)."""
        reply = self._ask(command, timeout, command.cmd)
        if isinstance(reply, ErrorReply):
            if reply.user_input:
                raise UserInputError(reply.message)
            raise TrialFailed(f"{command.cmd} failed", reply.message)
        return reply

    def _ask(self, command: Command[_R], timeout: float | None, doing: str) -> _R | ErrorReply:
        """Send ``command`` and read its reply (``TrialFailed``: the worker died, or
        gave none within ``timeout`` seconds and was killed)."""
        self.start()
        self._send(command)
        wait = self.trial_timeout if timeout is None else timeout
        return command.read_reply(self._receive(wait, doing))

    def kill(self) -> None:
        """Kill the worker (and anything it started) at once."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self._cleanup()

    def _cleanup(self) -> None:
        for handle in (self._replies, self.proc.stdin if self.proc else None):
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        self._replies = None

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._cleanup()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
