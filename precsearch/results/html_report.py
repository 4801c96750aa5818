"""report.html: one self-contained page with a study's answer and its evidence.

It opens from disk with no server and no internet (plotly.js is inlined once) and shows:

* the answer: the verdict, its speedup split into what low precision adds and what the
  batch size and XLA add, the peers (the global recipe, TensorFlow's graph rewrite),
  feasible or not with their reason, and the FP32 copy (the instrument's own error);
* the figures of :mod:`precsearch.results.figures`: the Pareto front with the confirmation's
  error bars, Optuna's optimisation history and parameter importances, and the loss
  curves of the Pareto policies over the FP32 band, by samples seen;
* the best policy per layer group: its dtype, and what the study measured where a
  trial differed from it in that group alone (the cost or saving of float32 there);
* where the run's time went.

Everything comes from the study's storage; no TensorFlow is imported.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from precsearch.files import write_text_atomic
from precsearch.records import PARTS, PEERS
from precsearch.results.explain import (
    PINS_LEGEND,
    PROBE_LEGEND,
    WHY_LEGEND,
    answer_params,
    group_effects,
    pin_summary,
    probe_summary,
    why_lines,
)
from precsearch.results.figures import curves_figure, optuna_figures, pareto_figure
from precsearch.results.report import (
    SHORT,
    SPEED_LEGEND,
    assignments_summary,
    outside_trials,
    time_summary,
    trials_text,
    ttq_text,
)
from precsearch.stats import figures_text, instrument_percent
from precsearch.stored import (
    confirmation_of,
    has_result,
    is_feasible,
    measured_trials,
    model_layers,
    results_that_ran,
    stored_policy,
    study_record,
)

__all__ = ["layer_groups", "render", "write_report"]


def write_report(study: Any, path: str | os.PathLike[str]) -> Path:
    """Write :func:`render` to ``path`` (atomically; in the study folder) and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(path, render(study, path.parent))


def layer_groups(study: Any) -> list[dict[str, Any]]:
    """Per dtype parameter (layer group) of the best trial: its dtype and the trials
    that differed from it there alone, with their speedups.

    Returns rows ``{group, dtype, measured: [(dtype, trial, speedup, feasible)]}``;
    the best trial is the confirmed one, else the fastest feasible.
    """
    record = confirmation_of(study)
    trials = measured_trials(study)
    if record is not None:
        best = study.trials[record.best_trial]
    else:
        feasible = [t for t in trials if is_feasible(t)]
        best = max(feasible, key=lambda t: t.values[0], default=None)
    if best is None:
        return []
    rows = []
    for name, value in best.params.items():
        if not name.startswith("dtype"):
            continue
        measured = []
        for other in trials:
            if other.params.get(name) == value or set(other.params) != set(best.params):
                continue
            if all(other.params[k] == best.params[k] for k in best.params if k != name):
                measured.append(
                    (other.params[name], other.number, other.values[0], is_feasible(other))
                )
        group = name.partition(":")[2] or "all layers"
        rows.append({"group": group, "dtype": value, "measured": measured, "best": best})
    return rows


def _probes_html(study: Any) -> str:
    sections = []
    for title, legend, lines in (
        ("Kept float32", PINS_LEGEND, pin_summary(study)),
        ("Probes", PROBE_LEGEND, probe_summary(study)),
    ):
        if lines:
            items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
            sections.append(
                f"<section><h2>{title}</h2><p>{html.escape(legend)}</p><ul>{items}</ul></section>"
            )
    return "".join(sections)


def _groups_html(study: Any) -> str:
    rows = layer_groups(study)
    if not rows:
        return "<p>No feasible trial yet.</p>"
    best = rows[0]["best"]
    speed = best.values[0]
    out = [
        f"<p>Trial {best.number} (search speedup {speed:.2f}x). 'Measured otherwise' is a "
        "trial that differed from it in that group alone: its search speedup beside this "
        "one's is the cost or saving of the other dtype there (search figures, a few timed "
        "blocks each; the answer's own are the confirmed ones above).</p>",
        "<table><tr><th>layer group</th><th>dtype</th><th>measured otherwise</th></tr>",
    ]
    for row in rows:
        if row["measured"]:
            cells = "; ".join(
                f"{SHORT.get(d, d)} in trial {n}: {s:.2f}x vs {speed:.2f}x "
                f"({(speed / s - 1) * 100:+.0f}% for {SHORT.get(row['dtype'], row['dtype'])})"
                + ("" if ok else " (infeasible)")
                for d, n, s, ok in row["measured"]
                if s
            )
        else:
            cells = "not measured"
        out.append(
            f"<tr><td>{html.escape(row['group'])}</td>"
            f"<td>{SHORT.get(row['dtype'], row['dtype'])}</td><td>{html.escape(cells)}</td></tr>"
        )
    out.append("</table>")
    if has_result(best):
        lines = assignments_summary(stored_policy(best), model_layers(study))
        out.append("<p>By layer class: " + html.escape("; ".join(lines)) + "</p>")
    why = why_lines(
        group_effects(study),
        answer_params(study, confirmation_of(study)),
        study_record(study, "probes"),
    )
    if why:
        out.append(f"<p>{html.escape(WHY_LEGEND)}</p><ul>")
        out += [f"<li>{html.escape(line)}</li>" for line in why]
        out.append("</ul>")
    return "\n".join(out)


def _answer_html(study: Any) -> str:
    record = confirmation_of(study)
    if record is None:
        return (
            "<p class='verdict'>Not confirmed yet: nothing is called best on the search's "
            "figures. <code>precsearch run</code> confirms the winners when its trials end."
            "</p>"
        )
    best = record.best
    if record.best_is_fp32:
        error = instrument_percent(record.null_vs_fp32)
        rows = [("answer", f"your FP32 training (instrument error ±{error:.1f}%)")]
    else:
        rows = [("answer vs your FP32 training", figures_text(best.get("speedup_vs_fp32")))]
    if not record.best_is_fp32:
        rows += [(f"{PARTS[p]} adds", figures_text(f)) for p, f in best.get("parts", {}).items()]
        rows += [
            (f"{PARTS[p]} left out", f"adds {figures_text(f)}")
            for p, f in best.get("left_out", {}).items()
        ]
        rows.append(("vs the global recipe", figures_text(best.get("speedup_vs_global_mixed"))))
        rows.append(("time to FP32's quality", ttq_text(best.get("time_to_quality"))))
    rows.append(("a copy of FP32 (instrument error)", figures_text(record.null_vs_fp32)))
    for name, peer in record.peers.items():
        if peer.get("vs_fp32"):
            text = f"{figures_text(peer['vs_fp32'])} of FP32 (feasible)"
        else:
            text = peer.get("status", "?") + (f" ({peer['reason']})" if peer.get("reason") else "")
        rows.append((PEERS[name][0] if name in PEERS else name, text))
    table = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (
        f"<p class='verdict'>{html.escape(record.verdict)}.</p>"
        f"<p>Geometric mean and {record.confidence:.0%} interval over "
        f"{record.rounds['fresh']} fresh rounds measured after the choice (chosen on "
        f"{record.rounds['selection']}); the answer is trial {record.best_trial}.</p>"
        f"<table>{table}</table>"
    )


def render(study: Any, folder: str | os.PathLike[str] | None = None) -> str:
    """The whole page as HTML text (see the module doc); ``folder`` is the study
    folder, for the commands that open its journal and TensorBoard runs."""
    import plotly.io as pio

    info = study_record(study, "model_info")
    trials = study.get_trials(deepcopy=False)
    figures: list[tuple[str, Any]] = [
        ("Pareto front", pareto_figure(study)),
        *optuna_figures(study),
        ("Loss curves", curves_figure(study)),
    ]
    parts = []
    first = True
    for title, fig in figures:
        if isinstance(fig, str):
            body = f"<p class='note'>{html.escape(fig)}</p>"
        else:
            body = pio.to_html(fig, full_html=False, include_plotlyjs=first)
            first = False
        parts.append(f"<section><h2>{html.escape(title)}</h2>{body}</section>")
    results = results_that_ran(measured_trials(study))
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    seconds = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    where = Path(folder) if folder is not None else Path(study.study_name)
    live = html.escape(f"optuna-dashboard {where / 'study.journal'}")
    logs = html.escape(f"tensorboard --logdir {where / 'tensorboard'}")
    hardware = study_record(study, "hardware") or {}
    model_file = study_record(study, "model_file") or "?"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>precsearch: {html.escape(study.study_name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
td, th {{ border: 1px solid #ddd; padding: 4px 10px; text-align: left; }}
.verdict {{ font-size: 1.15em; font-weight: 600; }}
.note {{ color: #666; }}
</style></head><body>
<h1>precsearch study {html.escape(study.study_name)!s}</h1>
<p>Model file: <code>{html.escape(str(model_file))}</code>;
batch size {info.batch_size if info else None}, XLA {"on" if info and info.jit_compile else "off"};
measured on {html.escape(str(hardware.get("cpu", "?")))}
({html.escape(", ".join(hardware.get("cpu_low_precision_flags", [])) or "no low-precision flags")};
{html.escape(", ".join(hardware.get("gpus", [])) or "no GPU")}).
{html.escape(trials_text(study))}.</p>
<section><h2>Answer</h2>{_answer_html(study)}</section>
{"".join(parts[:1])}
<p class="note">{html.escape(SPEED_LEGEND)}</p>
<section><h2>Best policy by layer group</h2>{_groups_html(study)}</section>
{_probes_html(study)}
{"".join(parts[1:])}
<section><h2>Where the time went</h2><p>{html.escape(time_summary(results, seconds))}
{html.escape(outside_trials(study))}</p></section>
<p class="note">Live view of the study: <code>{live}</code> (a journal storage; give the
URL of a shared one). Loss, step times, loss scale and gradient norms of every trial over
FP32: <code>{logs}</code>.</p>
</body></html>
"""
