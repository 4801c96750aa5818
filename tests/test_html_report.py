"""report.html: rendered from a real study, then opened in headless Chromium.

``.ci/run`` installs Debian's Chromium and sets ``PRECSEARCH_REQUIRE_BROWSER`` so that a
missing browser fails instead of skipping. The screenshot is kept as a test artefact in
``test-artifacts/`` (ignored by git).
"""

from __future__ import annotations

import html
import os
import shutil
from pathlib import Path

import optuna
import pytest
from helpers import run_cli
from optuna.distributions import CategoricalDistribution

from precsearch import load_study
from precsearch.results.explain import WHY_LEGEND
from precsearch.results.html_report import layer_groups, render
from precsearch.results.report import SPEED_LEGEND, trials_text

ARTIFACTS = Path(__file__).parents[1] / "test-artifacts"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("PRECSEARCH_REQUIRE_BROWSER"):
            pytest.fail("no Chromium: install Debian's chromium package")
        pytest.skip("no Chromium (Debian's chromium package)")
    return found


def _param(group: dict) -> str:
    return "dtype" if group["group"] == "all layers" else f"dtype:{group['group']}"


@pytest.mark.slow
def test_the_report_holds_the_answer_and_its_evidence(tiny_study):
    folder, first, _ = tiny_study
    assert (folder / "report.html").is_file() and "report.html:" in first.stdout
    result = load_study(folder)
    page = html.unescape(render(result.study))
    record = result.confirmation
    assert record.verdict.split(";")[0] in page
    for text in ("global mixed recipe", "TensorFlow's graph rewrite", "a copy of FP32"):
        assert text in page
    # The loss curves over the reference runs: the tiny study's --fp32-runs 3.
    assert "FP32 band (3 seeds)" in page
    # Trials counted without a sampler's repeats, and where each speed figure comes from.
    assert f"{trials_text(result.study)}." in page and SPEED_LEGEND in page
    # Why each layer group has its dtype, under its legend.
    assert f"{WHY_LEGEND}</p><ul>\n<li>Dense: " in page
    if record.best_is_fp32:
        assert "your FP32 training (instrument error ±" in page
    assert "Parameter importances" in page and "Optimization History" in page
    groups = layer_groups(result.study)
    best = result.study.trials[record.best_trial].params
    choices = result.study.trials[record.best_trial].distributions
    assert groups and all(
        g["dtype"] in choices[_param(g)].choices and g["dtype"] in ("float32", "bfloat16")
        for g in groups
    )
    assert [g["best"].number for g in groups] == [record.best_trial] * len(groups)
    for group in groups:
        # What was measured otherwise differs from the answer in this group alone.
        name = _param(group)
        assert best[name] == group["dtype"]
        for dtype, number, _, _ in group["measured"]:
            other = result.study.trials[number].params
            assert dtype != group["dtype"] and other[name] == dtype
            assert {k for k in best if other[k] != best[k]} == {name}
    shown = result._repr_html_()
    assert "<svg" in shown and "<table" in shown and "plotly" not in shown
    assert html.escape(trials_text(result.study)) in shown and html.escape(SPEED_LEGEND) in shown


def test_layer_groups_are_what_differed_from_the_best_in_one_group_alone():
    study = optuna.create_study(directions=["maximize", "minimize"])
    bf16, f32 = "mixed_bfloat16", "float32"
    trials = [  # (hidden, logits, batch size, speedup, feasible)
        (f32, f32, 32, 1.0, True),
        (bf16, bf16, 32, 1.5, True),
        (bf16, f32, 32, 1.6, True),  # the fastest feasible: the best
        (bf16, bf16, 64, 2.0, False),  # two groups away, and infeasible
        (f32, f32, 64, 0.9, True),  # the batch size differs too
    ]
    for hidden, logits, batch_size, speedup, feasible in trials:
        params = {"dtype:hidden": hidden, "dtype:logits": logits, "batch_size": batch_size}
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions={
                    "dtype:hidden": CategoricalDistribution([f32, bf16]),
                    "dtype:logits": CategoricalDistribution([f32, bf16]),
                    "batch_size": CategoricalDistribution([32, 64]),
                },
                values=[speedup, 0.1],
                user_attrs={"result": {}},
                constraints={"fidelity": -0.5 if feasible else 1.0},
            )
        )
    rows = layer_groups(study)
    assert [(r["group"], r["dtype"], r["best"].number) for r in rows] == [
        ("hidden", bf16, 2),
        ("logits", f32, 2),
    ]
    assert rows[0]["measured"] == [(f32, 0, 1.0, True)]
    assert rows[1]["measured"] == [(bf16, 1, 1.5, True)]


@pytest.mark.slow
def test_the_report_draws_in_headless_chromium_without_errors(tiny_study):
    from playwright.sync_api import sync_playwright

    folder, _, _ = tiny_study
    again = run_cli("report", str(folder))  # the command writes it too
    assert again.returncode == 0, again.stderr[-2000:]
    errors: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.route("http*://**", lambda route: errors.append(route.request.url))
            page.goto((folder / "report.html").resolve().as_uri())
            page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 8",
                timeout=30_000,
            )
            plots = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
            points = page.evaluate(
                "document.querySelectorAll('.js-plotly-plot .scatterlayer .point').length"
            )
            bars = page.evaluate("document.querySelectorAll('.js-plotly-plot .bars path').length")
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    assert not errors, errors  # no script error, and no request off the page
    assert plots == 4  # Pareto front, history, importances, loss curves
    assert points >= 6  # every finished trial of the tiny study, at least
    assert bars >= 1  # the importances drew
    print(f"screenshot: {ARTIFACTS / 'report.png'}")


def test_a_figure_whose_package_is_missing_is_a_sentence(monkeypatch):
    import optuna
    import optuna.visualization as vis

    from precsearch.results.figures import optuna_figures

    def missing(*args, **kwargs):
        raise ImportError("Tried to import 'sklearn' but failed. Please make sure ...")

    monkeypatch.setattr(vis, "plot_param_importances", missing)
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(optuna.trial.create_trial(values=[1.0, 0.0], params={}, distributions={}))
    figures = dict(optuna_figures(study))
    assert figures["Parameter importances"] == (
        "Optuna could not draw it here: Tried to import 'sklearn' but failed"
    )
