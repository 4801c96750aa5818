"""The confirmation: re-measure the best candidates side by side, then choose the answer.

Nothing is called best on the search's figures alone: a trial's speedup comes from a
few blocks, and the search picks its maximum (a winner's curse). After the trials:

1. :func:`confirm` (in the study's process) takes the top feasible Pareto trials and the
   global recipe (one global mixed policy, float32 output);
2. :func:`measure` (in a worker, which has TensorFlow) times all of them round by round,
   interleaved with FP32 and with a second, identical FP32 model — what that copy scores
   against FP32 is the instrument's own error on this model and machine;
3. :func:`decide` turns the per-round samples/s into ratios within each round and picks
   the fastest candidate whose median is above 1 and above every round of the FP32
   copy; if none is, the answer is FP32, said plainly.

The record is a :class:`~precsearch.records.Confirmation`, stored in the study.
"""

from __future__ import annotations

from typing import Any

from precsearch.errors import TrialFailed
from precsearch.export import stored_policy
from precsearch.instrument import Timed, median, spread, timed_rounds
from precsearch.objectives import is_feasible
from precsearch.policy import Policy
from precsearch.records import Confirmation, Measurement

__all__ = ["confirm", "decide", "measure", "ratio"]


def measure(
    runner: Any,
    candidates: list[Policy],
    global_policy: Policy | None = None,
    rounds: int = 5,
    block: int = 10,
) -> Measurement:
    """Time FP32, an FP32 copy, the global recipe and the candidates, round by round.

    Every configuration is traced and warmed up first; the rounds follow
    :func:`precsearch.instrument.timed_rounds` (a freshly shuffled order each round).

    Args:
        runner: A :class:`~precsearch.runner.Runner` (this process has TensorFlow).
        candidates: The policies to confirm (labels ``c0``, ``c1``...).
        global_policy: The global recipe (label ``global``), if any.
        rounds: Rounds; every ratio compares two configurations within one round.
        block: Least steps per timed block.
    """
    problem = runner.problem
    fp32 = Policy(batch_size=problem.batch_size)
    labelled: list[tuple[str, Policy]] = [("fp32", fp32), ("null", fp32)]
    if global_policy is not None:
        labelled.append(("global", global_policy))
    labelled += [(f"c{i}", policy) for i, policy in enumerate(candidates)]
    configs = []
    for label, policy in labelled:
        policy = problem.normalise(policy)
        configs.append(
            Timed(
                label=label,
                model=problem.model_for(policy, seed=0),
                iterator=iter(problem.dataset(policy.batch_size, seed=0)),
                batch_size=policy.batch_size,
            )
        )
    rates = timed_rounds(configs, rounds, block, warmup=runner.budget.warmup)
    return Measurement(rates=rates, steps={c.label: c.steps for c in configs})


def ratio(measured: Measurement, a: str, b: str) -> dict[str, float]:
    """``{median, min, max, rounds}`` of ``a``'s samples/s over ``b``'s, round by round."""
    return spread([x / y for x, y in zip(measured.rates[a], measured.rates[b], strict=True)])


def _invert(figures: dict[str, float]) -> dict[str, float]:
    return {
        "median": 1 / figures["median"],
        "min": 1 / figures["max"],
        "max": 1 / figures["min"],
        "rounds": figures["rounds"],
    }


def decide(
    measured: Measurement,
    trials: list[int],
    fp32_trial: int,
    global_trial: int | None,
    rounds: int,
    block: int,
    global_reason: str = "",
) -> Confirmation:
    """Choose the answer from a measurement (see the module doc).

    Args:
        measured: Samples/s per round of ``fp32``, ``null``, maybe ``global``, and
            ``c0``... for the candidate ``trials`` in order.
        trials: The candidates' trial numbers.
        fp32_trial, global_trial: The baseline trials' numbers.
        rounds, block: How it was measured, for the record.
        global_reason: Why the global recipe was not measured (it did not train like
            FP32): it is then reported as infeasible, never as a ratio.
    """
    has_global = "global" in measured.rates
    candidates = [
        {
            "trial": trial,
            "samples_per_s": median(measured.rates[f"c{i}"]),
            "speedup_vs_fp32": ratio(measured, f"c{i}", "fp32"),
            "speedup_vs_global_mixed": ratio(measured, f"c{i}", "global") if has_global else None,
        }
        for i, trial in enumerate(trials)
    ]
    null = ratio(measured, "null", "fp32")
    global_vs_fp32 = ratio(measured, "global", "fp32") if has_global else None
    bar = max(1.0, null["max"])
    winners = [c for c in candidates if c["speedup_vs_fp32"]["median"] > bar]
    if winners:
        best = max(winners, key=lambda c: c["speedup_vs_fp32"]["median"])
        vs = best["speedup_vs_fp32"]
        best_trial, best_is_fp32 = best["trial"], False
        chosen = {k: best[k] for k in ("speedup_vs_fp32", "speedup_vs_global_mixed")}
        verdict = (
            f"trial {best['trial']} is {vs['median']:.2f}x FP32 (min {vs['min']:.2f}, "
            f"max {vs['max']:.2f}, {vs['rounds']} rounds)"
        )
        if best["speedup_vs_global_mixed"]:
            g = best["speedup_vs_global_mixed"]
            verdict += f" and {g['median']:.2f}x the global mixed recipe"
        verdict += (
            f"; a copy of FP32 measured {null['median']:.2f}x "
            f"({null['min']:.2f}-{null['max']:.2f}), the instrument's error"
        )
    else:
        best_trial, best_is_fp32 = fp32_trial, True
        ones = {"median": 1.0, "min": 1.0, "max": 1.0, "rounds": rounds}
        chosen = {
            "speedup_vs_fp32": ones,
            "speedup_vs_global_mixed": _invert(global_vs_fp32) if global_vs_fp32 else None,
        }
        fastest = max(candidates, key=lambda c: c["speedup_vs_fp32"]["median"], default=None)
        verdict = "nothing beat FP32 when re-measured: the answer is FP32"
        if fastest:
            verdict += (
                f" (the fastest candidate, trial {fastest['trial']}, confirmed at "
                f"{fastest['speedup_vs_fp32']['median']:.2f}x"
            )
            if fastest["speedup_vs_fp32"]["median"] > 1.0:
                verdict += f", not above the {bar:.2f}x a copy of FP32 reached"
            verdict += ")"
        else:
            verdict += " (no candidate other than FP32 was feasible)"
    if global_reason:
        verdict += f"; the global mixed recipe is {global_reason}"
    return Confirmation(
        rounds=rounds,
        block=block,
        candidates=candidates,
        fp32_trial=fp32_trial,
        global_trial=global_trial,
        global_vs_fp32=global_vs_fp32,
        global_reason=global_reason,
        null_vs_fp32=null,
        bar=bar,
        fp32_samples_per_s=median(measured.rates["fp32"]),
        best_trial=best_trial,
        best_is_fp32=best_is_fp32,
        best=chosen,
        verdict=verdict,
    )


def confirm(
    study: Any, executor: Any, top: int = 3, rounds: int = 5, block: int = 10
) -> Confirmation:
    """Re-measure the best feasible candidates, choose the answer, store the record.

    The top ``top`` feasible Pareto trials (and the global recipe, if feasible) are timed
    by ``executor.confirm`` (a worker's :func:`measure`) and judged by :func:`decide`.

    Raises:
        TrialFailed: The FP32 baseline trial did not complete, or the worker failed.
    """
    by_label = {
        t.user_attrs.get("baseline"): t
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and t.user_attrs.get("baseline")
    }
    fp32_trial = by_label.get("fp32")
    if fp32_trial is None:
        raise TrialFailed("no FP32 baseline", "the FP32 baseline trial did not complete")
    fp32_policy = stored_policy(fp32_trial)
    global_trial = next((t for label, t in by_label.items() if label.startswith("global_")), None)
    global_policy, global_reason = None, ""
    if global_trial is not None and is_feasible(global_trial):
        global_policy = stored_policy(global_trial)
    elif global_trial is not None:
        global_reason = f"infeasible ({global_trial.user_attrs.get('reason') or 'constraint'})"

    front = [
        t
        for t in study.best_trials
        if "duplicate_of" not in t.user_attrs and stored_policy(t) != fp32_policy
    ]
    chosen = sorted(front, key=lambda t: -t.values[0])[:top]
    if global_policy is not None and global_trial not in chosen:
        chosen.append(global_trial)
    measured = executor.confirm(
        [stored_policy(t) for t in chosen], global_policy, rounds=rounds, block=block
    )
    record = decide(
        measured,
        [t.number for t in chosen],
        fp32_trial.number,
        global_trial.number if global_trial else None,
        rounds,
        block,
        global_reason,
    )
    study.set_user_attr("confirmation", record.to_dict())
    return record
