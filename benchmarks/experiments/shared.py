"""What several experiments share, one piece of code each: where the example studies and
the work folders are, a fresh search, a started worker, policies timed beside FP32, a
space measured policy by policy, Optuna's samplers as the replays make them, a search's
answer and a stored study's time as the tables show them.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from pages import ROOT

import precsearch
from precsearch import Policy, SearchResult
from precsearch.records import PARTS, Budget, Measurement, TrialResult
from precsearch.results.report import summarize_policy, time_split, ttq_text
from precsearch.stats import figures_text, instrument_percent, ratio_figures
from precsearch.stored import answered_by_probes, results_that_ran, study_record
from precsearch.study.executors import Worker
from precsearch.study.space import SearchSpace, SpaceOptions

STUDIES = ROOT / "studies"
WORK = ROOT / "benchmarks" / "work"  # study folders and workers' files; ignored by git

# How long the probes may take in the experiments that run them as `precsearch run` does.
PROBE_TIME = 60.0

FP32_ANSWER = "FP32 itself"  # an FP32 answer has no ratio: the copy's is the error


def model_file(example: str) -> Path:
    """An example study's model file."""
    return STUDIES / example / "model.py"


def fresh_search(
    folder: str, example: str, study_name: str | None = None, **options: Any
) -> tuple[SearchResult, float]:
    """A search of an example from an empty study folder ``WORK/folder/<study_name>``
    (the example's name unless given), progress on stderr: the result and its wall
    seconds. ``options`` are those of ``precsearch.search``."""
    study_name = study_name or example
    shutil.rmtree(WORK / folder / study_name, ignore_errors=True)
    t0 = time.perf_counter()
    result = precsearch.search(
        str(model_file(example)),
        out=str(WORK / folder),
        study_name=study_name,
        progress=sys.stderr,
        **options,
    )
    return result, time.perf_counter() - t0


@contextmanager
def started_worker(example: str, work: Path, budget: Budget | None = None) -> Iterator[Worker]:
    """A worker process on an example's model file, started (its FP32 references
    measured), stopped on leaving."""
    with Worker(model_file(example), work, budget or Budget()) as worker:
        worker.start()
        yield worker


def beside_fp32(worker: Worker, policies: list[Policy], rounds: int, block: int) -> Measurement:
    """Rounds of FP32, its copy and the policies as ``c0``, ``c1``... in random orders."""
    base = Policy(batch_size=worker.model_info.batch_size,
                             jit_compile=worker.model_info.jit_compile)  # fmt: skip
    configs = [("fp32", base), ("null", base), *[(f"c{i}", p) for i, p in enumerate(policies)]]
    rng = np.random.default_rng(len(policies))
    orders = [[configs[i][0] for i in rng.permutation(len(configs))] for _ in range(rounds)]
    return worker.confirm(configs, orders, block)


def vs_fp32(rates: dict[str, list[float]], label: str) -> dict[str, float]:
    """A label's per-round rates over FP32's, as ratio figures (``null``: the A/A test)."""
    return ratio_figures(rates[label], rates["fp32"])


def fp32_params(space: SearchSpace) -> dict[str, Any]:
    """The parameter values of the user's own FP32 training in ``space``."""
    return dict(space.baselines())["fp32"]


@dataclass(frozen=True)
class Exhaustive:
    """A space small enough to measure every policy of, and how: ``chunk`` candidates
    per session of ``rounds`` rounds of at least ``block`` calls, beside FP32."""

    example: str
    group_by: str
    batch_sizes: tuple[int, ...]
    dimensions: tuple[str, ...]
    rounds: int
    block: int
    chunk: int

    def space(self, worker: Worker) -> SearchSpace:
        """The space, as the worker's model describes it."""
        options = SpaceOptions(group_by=self.group_by, dtypes=["float32", "bfloat16"],
                               batch_sizes=list(self.batch_sizes))  # fmt: skip
        return SearchSpace(worker.model_info.to_dict(), options, list(self.dimensions))

    def measure(self, worker: Worker, space: SearchSpace, label: str) -> MeasuredSpace:
        """Every policy of ``space`` against FP32, ``chunk`` candidates per session of
        ``rounds`` rounds; progress on stderr under ``label``."""
        choices = space.choices()
        names = list(choices)
        points = [dict(zip(names, v, strict=True)) for v in itertools.product(*choices.values())]
        figures: dict[tuple, dict[str, float]] = {}
        t0 = time.perf_counter()
        for start in range(0, len(points), self.chunk):
            chunk = points[start : start + self.chunk]
            policies = [space.policy(p) for p in chunk]
            measured = beside_fp32(worker, policies, self.rounds, self.block)
            for i, params in enumerate(chunk):
                figures[tuple(params[n] for n in names)] = vs_fp32(measured.rates, f"c{i}")
            done = f"{len(figures)}/{len(points)} measured ({time.perf_counter() - t0:.0f} s)"
            print(f"{label}: {done}", file=sys.stderr, flush=True)
        return MeasuredSpace(space, figures, time.perf_counter() - t0)


# Small enough to measure every policy of: digits_cnn with one dtype per layer in the
# cast-aware space (its convolutions and hidden Dense get a choice), XLA on or off and two
# batch sizes, 128 policies. (tiny_transformer by type, 256 policies, ran over 24 minutes
# here without finishing.) The efficiency and warmstart experiments replay searches on it.
DIGITS_CNN_BY_LAYER = Exhaustive(
    example="digits_cnn",
    group_by="layer",
    batch_sizes=(64, 256),
    dimensions=("layer_dtypes", "jit_compile", "batch_size"),
    rounds=3,
    block=5,
    chunk=16,
)


@dataclass(frozen=True)
class MeasuredSpace:
    """Every policy of a space against FP32: ratio figures keyed by the parameter values
    in the order of ``space.choices()``, and the seconds the measuring took."""

    space: SearchSpace
    figures: dict[tuple, dict[str, float]]
    seconds: float

    @property
    def names(self) -> list[str]:
        """The parameters, in the order of the keys' values."""
        return list(self.space.choices())

    @property
    def speed(self) -> dict[tuple, float]:
        """Each policy's geometric-mean speedup over FP32."""
        return {key: figures["estimate"] for key, figures in self.figures.items()}

    @property
    def optimum(self) -> float:
        """The best measured speedup."""
        return max(self.speed.values())

    def params(self, key: tuple) -> dict[str, Any]:
        """A key's parameter values by name."""
        return dict(zip(self.names, key, strict=True))

    def key(self, params: dict[str, Any]) -> tuple:
        """The key of a full set of parameter values."""
        return tuple(params[n] for n in self.names)

    @property
    def fp32(self) -> dict[str, float] | None:
        """The figures of the user's own FP32 training timed against itself: the noise of
        one entry (``None``: not in the space)."""
        return self.figures.get(self.key(fp32_params(self.space)))

    def ranked(self) -> list[tuple[tuple, float]]:
        """``(key, speedup)``, fastest first."""
        return sorted(self.speed.items(), key=lambda kv: -kv[1])


def sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """An Optuna sampler as the replays use it: TPE with 3 start-up trials, NSGA-II
    with population 4, random; Optuna's defaults otherwise."""
    samplers = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed, n_startup_trials=3),
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, population_size=4),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }
    return samplers[name]()


def fp32_copy_fields(null_vs_fp32: dict[str, float]) -> dict[str, Any]:
    """The FP32 copy's ratio (the A/A test) and the instrument's error it shows."""
    return {
        "fp32_copy_vs_fp32": figures_text(null_vs_fp32),
        "instrument_error_pct": round(instrument_percent(null_vs_fp32), 1),
    }


def parts_text(parts: dict[str, Any] | None) -> str:
    """``low precision 1.35x (1.30-1.41); XLA 1.10x (1.05-1.15)``, ``-`` for none."""
    return "; ".join(f"{PARTS[p]} {figures_text(f)}" for p, f in (parts or {}).items()) or "-"


def answer_fields(result: SearchResult) -> dict[str, Any]:
    """A finished search's trials and confirmed answer, as the benchmark tables show them."""
    record = result.confirmation
    policy = result.best_policy
    frame = result.trials
    new = frame[frame["duplicate_of"].isna()]
    manifest = policy.manifest
    confirmed = manifest["confirmed"]
    peers = record.peers
    return {
        "trials": len(new),
        "statuses": ", ".join(f"{k} {v}" for k, v in new["status"].value_counts().items()),
        "best_trial": record.best_trial,
        "best_is_fp32": record.best_is_fp32,
        "best_policy": summarize_policy(policy.to_dict()),
        "batch_size": policy.batch_size,
        "jit": policy.jit_compile,
        "own_batch_size": manifest["baseline"]["batch_size"],
        "own_jit": manifest["baseline"]["jit_compile"],
        "answer": confirmed.get("answer"),
        "vs_fp32": (
            FP32_ANSWER if record.best_is_fp32 else figures_text(confirmed["speedup_vs_fp32"])
        ),
        # What each part kept adds (the others kept), and each part left out.
        "parts": parts_text(confirmed.get("parts")),
        "left_out": parts_text(confirmed.get("left_out")),
        "time_to_quality": ttq_text(confirmed.get("time_to_quality")),
        "vs_global": figures_text(confirmed.get("speedup_vs_global_mixed")),
        "global_peer": peer_text(peers.get("global")),
        "rewrite_peer": peer_text(peers.get("graph_rewrite")),
        **fp32_copy_fields(record.null_vs_fp32),
        # The instrument's error's instance part: an instance's own offset, sd.
        "instance_sd_pct": round((confirmed.get("instances") or {}).get("sd_percent", 0), 1),
        "selection_rounds": record.rounds["selection"],
        "fresh_rounds": record.rounds["fresh"],
        "fidelity_gap": manifest["fidelity"]["gap"],
        "fp32_as_a_candidate_gap": manifest["fidelity"]["fp32_as_a_candidate"],
        "judged_on": manifest["fidelity"]["judging"],
        "lr_rule": manifest["lr_rule"].get("rule"),
        "precision_gap": manifest["fidelity"]["precision_gap"],
        "verdict": record.verdict,
        "raw_rounds": json.dumps(record.measured),
    }


def peer_text(peer: dict[str, Any] | None) -> str:
    """A peer's ratio to FP32, or why there is none."""
    if not peer:
        return "-"
    if peer.get("vs_fp32"):
        return figures_text(peer["vs_fp32"])
    return f"{peer['status']} ({peer['reason']})" if peer.get("reason") else peer["status"]


@dataclass(frozen=True)
class StudyTime:
    """Where a stored study's time went: the probes' record (``{}``: none), the results
    of the trials that ran, their seconds per phase (keyed as ``TrialResult.timings``),
    their total and overhead share, and the proposals the probes answered."""

    probes: dict[str, Any]
    results: list[TrialResult]
    phases: dict[str, float]
    trials_s: float
    overhead_share: float
    answered_by_probes: int

    @property
    def probe_s(self) -> float:
        """The probes' seconds (0: no probes)."""
        return self.probes.get("seconds", 0.0)


def study_time(study: optuna.Study) -> StudyTime:
    """Where a stored study's time went."""
    results = results_that_ran(study.trials)
    phases, total, share = time_split(results)
    return StudyTime(
        probes=study_record(study, "probes") or {},
        results=results,
        phases=phases,
        trials_s=total,
        overhead_share=share,
        answered_by_probes=sum(answered_by_probes(t) for t in study.trials),
    )
