"""The figures of a study: plotly for report.html and notebooks, a static SVG for
Jupyter's rich display. Everything comes from the study's storage (no TensorFlow).

* :func:`pareto_figure`: speedup against the fidelity gap of every finished trial, the
  confirmation's min-max as error bars, infeasible trials grey with their reason;
* :func:`curves_figure`: the Pareto policies' loss by samples seen over the band of
  the FP32 reference runs;
* :func:`optuna_figures`: Optuna's own optimisation history and parameter importances;
* :func:`pareto_svg`: the Pareto plot, small and without plotly.js.
"""

from __future__ import annotations

import html
import math
from typing import Any

from precsearch.results.report import pareto_rows, summarize_policy
from precsearch.stats import figures_text
from precsearch.stored import (
    baseline_of,
    confirmation_of,
    is_feasible,
    measured_trials,
    reason_of,
    result_of,
    stored_references,
    study_record,
)

__all__ = ["curves_figure", "optuna_figures", "pareto_figure", "pareto_svg"]

GREY = "#b0b0b0"
BLUE = "#1f77b4"
ORANGE = "#ff7f0e"


def _gap(trial: Any) -> float | None:
    gap = trial.values[1] if trial.values and len(trial.values) > 1 else None
    return gap if gap is not None and math.isfinite(gap) else None


def pareto_figure(study: Any) -> Any:
    """Speedup vs fidelity gap of every finished trial (a plotly figure).

    Feasible trials are blue, the Pareto front orange, infeasible ones grey with their
    reason on hover (drawn at the top edge when they have no finite gap); the
    confirmation's selection rounds add min-max error bars, and the answer a star.
    """
    import plotly.graph_objects as go

    record = confirmation_of(study)
    front = {row["trial"] for row in pareto_rows(study)}
    trials = measured_trials(study)
    gaps = [g for g in map(_gap, trials) if g is not None]
    top = max([*gaps, 1.0]) * 1.5
    fig = go.Figure()
    groups = {
        "Pareto front": [t for t in trials if t.number in front],
        "feasible": [t for t in trials if is_feasible(t) and t.number not in front],
        "infeasible": [t for t in trials if not is_feasible(t)],
    }
    colours = {"Pareto front": ORANGE, "feasible": BLUE, "infeasible": GREY}
    for name, members in groups.items():
        if not members:
            continue
        fig.add_trace(
            go.Scatter(
                x=[t.values[0] for t in members],
                y=[_gap(t) if _gap(t) is not None else top for t in members],
                mode="markers",
                name=name,
                marker={
                    "color": colours[name],
                    "size": 11 if name == "Pareto front" else 8,
                    "symbol": "x" if name == "infeasible" else "circle",
                },
                text=[_hover(t) for t in members],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    if record and record.candidates:
        by_number = {t.number: t for t in trials}
        rows = [
            c for c in record.candidates if c.get("speedup_vs_fp32") and c["trial"] in by_number
        ]
        spreads = [c["speedup_vs_fp32"] for c in rows]
        fig.add_trace(
            go.Scatter(
                x=[s["estimate"] for s in spreads],
                y=[_gap(by_number[c["trial"]]) or 0.0 for c in rows],
                mode="markers",
                name="selection rounds (estimate, 95% interval)",
                marker={"color": "black", "size": 7, "symbol": "diamond"},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [s["high"] - s["estimate"] for s in spreads],
                    "arrayminus": [s["estimate"] - s["low"] for s in spreads],
                },
                text=[f"trial {c['trial']}: {figures_text(c['speedup_vs_fp32'])}" for c in rows],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.add_vline(x=1.0, line_dash="dot", line_color=GREY, annotation_text="FP32")
    tolerance = study_record(study, "tolerance")
    if tolerance:
        fig.add_hline(y=tolerance, line_dash="dot", line_color=GREY, annotation_text="tolerance")
    fig.update_layout(
        title="Speedup vs fidelity gap (every finished trial)",
        xaxis_title="speedup vs your FP32 training (samples/s)",
        yaxis_title="fidelity gap (noise units; above 0: worse than FP32)",
        height=480,
        margin={"t": 50, "b": 50},
    )
    return fig


def pareto_svg(study: Any, width: int = 420, height: int = 260) -> str:
    """The Pareto plot as a small static SVG (for a notebook's rich display, which
    should not carry plotly.js): speedup across, fidelity gap up; orange the Pareto
    front, blue other feasible trials, grey crosses the infeasible ones."""
    trials = measured_trials(study)
    if not trials:
        return ""
    front = {row["trial"] for row in pareto_rows(study)}
    gaps = [g for g in map(_gap, trials) if g is not None]
    top = max([*gaps, 1.0]) * 1.5
    speeds = [t.values[0] for t in trials]
    lo, hi = min([*speeds, 1.0]) * 0.9, max([*speeds, 1.0]) * 1.1
    pad = 36

    def x(v: float) -> float:
        return pad + (v - lo) / (hi - lo) * (width - 2 * pad)

    def y(v: float) -> float:
        return height - pad - v / top * (height - 2 * pad)

    marks = [
        f'<line x1="{x(1.0):.1f}" y1="{pad}" x2="{x(1.0):.1f}" y2="{height - pad}" '
        f'stroke="{GREY}" stroke-dasharray="3"/>',
        f'<text x="{x(1.0) + 3:.1f}" y="{pad + 10}" font-size="10" fill="#666">FP32</text>',
        f'<text x="{width / 2}" y="{height - 8}" font-size="11" text-anchor="middle">'
        "speedup vs FP32</text>",
        f'<text x="12" y="{height / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {height / 2})">fidelity gap</text>',
    ]
    for t in trials:
        gap = _gap(t)
        cx, cy = x(t.values[0]), y(gap if gap is not None else top)
        label = html.escape(f"trial {t.number}: {t.values[0]:.2f}x")
        if not is_feasible(t):
            marks.append(
                f'<path d="M{cx - 4:.1f},{cy - 4:.1f}l8,8m0,-8l-8,8" stroke="{GREY}" '
                f'stroke-width="2"><title>{label} (infeasible)</title></path>'
            )
        else:
            colour = ORANGE if t.number in front else BLUE
            marks.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{5 if t.number in front else 4}" '
                f'fill="{colour}"><title>{label}</title></circle>'
            )
    axes = (
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
        'fill="none" stroke="#ccc"/>'
        f'<text x="{pad}" y="{height - pad + 12}" font-size="10">{lo:.2f}x</text>'
        f'<text x="{width - pad}" y="{height - pad + 12}" font-size="10" '
        f'text-anchor="end">{hi:.2f}x</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        f"{axes}{''.join(marks)}</svg>"
    )


def _hover(trial: Any) -> str:
    policy = result_of(trial).policy
    text = f"trial {trial.number}"
    if baseline_of(trial):
        text += f" [{baseline_of(trial)}]"
    text += f"<br>{html.escape(summarize_policy(policy))}"
    xla = "on" if policy.get("jit_compile") else "off"
    text += f"<br>batch {policy.get('batch_size')}, XLA {xla}"
    gap = _gap(trial)
    text += f"<br>speedup {trial.values[0]:.2f}x, gap " + (f"{gap:.2f}" if gap is not None else "-")
    if not is_feasible(trial):
        text += f"<br>infeasible: {html.escape(reason_of(trial) or '?')}"
    return text


def _band(study: Any) -> Any:
    """The FP32 reference runs of the user's own training (most seeds), or ``None``."""
    info = study_record(study, "model_info")
    if info is None:
        return None
    refs = [
        value
        for value in stored_references(study).values()
        if value.get("batch_size") == info.batch_size
        and bool(value.get("jit_compile")) == bool(info.jit_compile)
    ]
    return max(
        refs, key=lambda ref: (len(ref.get("curves", [])), ref.get("steps", 0)), default=None
    )


def curves_figure(study: Any) -> Any:
    """Loss by samples seen of the Pareto policies over the FP32 band (a plotly figure)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    ref = _band(study)
    if ref and ref.get("curves"):
        per = ref.get("samples_per_call") or ref["batch_size"]
        curves = [c for c in ref["curves"] if c]
        n = min(map(len, curves))
        xs = [per * (i + 1) for i in range(n)]
        columns = [[c[i] for c in curves if c[i] is not None] for i in range(n)]
        low = [min(col) if col else None for col in columns]
        high = [max(col) if col else None for col in columns]
        mean = [sum(col) / len(col) if col else None for col in columns]
        fig.add_trace(go.Scatter(x=xs, y=high, mode="lines", line={"width": 0},
                                 showlegend=False, hoverinfo="skip"))  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=xs, y=low, mode="lines", line={"width": 0}, fill="tonexty",
                fillcolor="rgba(120,120,120,0.25)", name=f"FP32 band ({len(curves)} seeds)",
            )
        )  # fmt: skip
        fig.add_trace(go.Scatter(x=xs, y=mean, mode="lines", name="FP32 mean",
                                 line={"color": "black", "dash": "dash"}))  # fmt: skip
    for row in pareto_rows(study):
        curve = result_of(study.trials[row["trial"]]).curve
        fig.add_trace(
            go.Scatter(
                x=curve.get("samples", []),
                y=curve.get("loss", []),
                mode="lines",
                name=f"trial {row['trial']} ({row['speedup']:.2f}x)",
            )
        )
    fig.update_layout(
        title="Training loss by samples seen: the Pareto policies over the FP32 band",
        xaxis_title="samples seen",
        yaxis_title="training loss",
        height=420,
        margin={"t": 50, "b": 50},
    )
    return fig


def optuna_figures(study: Any) -> list[tuple[str, Any]]:
    """Optuna's optimisation history and parameter importances of the speedup; a
    sentence instead where Optuna cannot draw one (say, too few trials)."""
    import optuna.visualization as vis
    from optuna.importance import FanovaImportanceEvaluator

    def speedup(trial: Any) -> float:
        return trial.values[0]

    def importances(study: Any, **kwargs: Any) -> Any:
        # fANOVA: the share of the speedup's variance each parameter explains (Optuna's
        # default evaluator ranks parameters for *low* values of the target).
        return vis.plot_param_importances(
            study, evaluator=FanovaImportanceEvaluator(seed=0), **kwargs
        )

    out: list[tuple[str, Any]] = []
    for title, draw in (
        ("Optimisation history", vis.plot_optimization_history),
        ("Parameter importances", importances),
    ):
        try:
            fig = draw(study, target=speedup, target_name="speedup vs FP32")
            fig.update_layout(height=400, margin={"t": 50, "b": 50})
            out.append((title, fig))
        except (ValueError, RuntimeError, ZeroDivisionError, IndexError) as exc:
            out.append((title, f"Optuna could not draw it for this study: {exc}"))
        except ImportError as exc:  # fANOVA needs scikit-learn, which precsearch does not
            first = str(exc).split(". ")[0]  # "Tried to import 'sklearn' but failed"
            out.append((title, f"Optuna could not draw it here: {first}"))
    return out
