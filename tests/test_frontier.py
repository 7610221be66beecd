"""The throughput-interactivity frontier and the gap at equal interactivity: the maths by hand, then through
compare and every report format on result sets shaped like llm-infer's."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from gapbench import compare as compare_mod
from gapbench.compare import frontier as fr
from gapbench.report import render
from gapbench.results import Measurement, ResultSet
from gapbench.stats import Stats

P = fr.Point


def test_pareto_keeps_what_no_other_point_beats_on_both_axes():
    pts = [P(1, 100), P(2, 90), P(2, 80), P(3, 50), P(1.5, 70), P(4, 10), P(0.5, 95)]
    assert [(p.x, p.y) for p in fr.pareto(pts)] == [(1, 100), (2, 90), (3, 50), (4, 10)]
    assert fr.pareto([]) == ()


def test_interpolation_is_linear_with_an_interval_and_does_not_extrapolate():
    f = fr.pareto([P(2, 90, y_ci=(85, 95)), P(3, 50, y_ci=(45, 55))])
    v = fr.interpolate(f, 2.5)
    assert v.y == pytest.approx(70.0) and v.ci == pytest.approx((65.0, 75.0))
    assert fr.interpolate(f, 2.0).y == pytest.approx(90.0)
    assert fr.interpolate(f, 3.1) is None  # beyond the highest interactivity: not reached, never extrapolated
    # below the lowest interactivity the highest-throughput point serves (every user gets at least that much)
    assert fr.interpolate(f, 1.0).y == 90.0 and fr.interpolate(f, 1.0).ci == (85, 95)
    # x intervals widen the y interval through the local slope (40 per unit of x): half-width 0.1 -> 4
    g = fr.pareto([P(2, 90, (1.9, 2.1), (85, 95)), P(3, 50, (2.9, 3.1), (45, 55))])
    assert fr.interpolate(g, 2.5).ci == pytest.approx((61.0, 79.0))
    # a steep frontier: the x term alone would reach below zero; the two points' intervals bound it
    steep = fr.pareto([P(2, 900, (1.5, 2.5), (850, 950)), P(2.2, 100, (1.7, 2.7), (90, 110))])
    assert fr.interpolate(steep, 2.1).ci == pytest.approx((90.0, 950.0))
    # a published curve (no intervals) interpolates without one
    assert fr.interpolate(fr.pareto([P(1, 10), P(3, 6)]), 2).ci is None


def test_gap_and_levels():
    base, better = fr.Value(100.0, (95.0, 105.0)), fr.Value(130.0, (120.0, 140.0))
    g = fr.value_gap(better, base)
    assert g.pct == pytest.approx(30.0) and g.significant is True
    assert fr.value_gap(fr.Value(102.0, (97.0, 108.0)), base).overlap is True
    assert fr.value_gap(None, base).status == "not reached"
    assert fr.value_gap(fr.Value(50.0, None), base).overlap is None
    lv = fr.default_levels([fr.pareto([P(1, 9), P(9, 1)]), fr.pareto([P(2, 9), P(16, 1)])])
    assert lv == pytest.approx([2.0, math.sqrt(18.0), 9.0])
    # no shared range: the highest interactivity both curves reach
    assert fr.default_levels([fr.pareto([P(1, 9), P(2, 1)]), fr.pareto([P(3, 9), P(4, 1)])]) == [2]


def infer_set(label: str, points: list[tuple[int, float, float]], spread: float = 0.02, **series) -> ResultSet:
    """An llm-infer-like result set: per batch size, a tokens/s-per-user row and an output tokens/s row."""
    base = {"model": "tiny", "engine": "transformers", "batching": "static", "dtype": "bf16", "input_len": 32,
            "output_len": 8, **series}
    ms = []
    for b, x, y in points:
        for metric, value, unit in (("output_tokens_per_s", y, "tokens/s"), ("tokens_per_s_per_user", x, "tokens/s/user"),
                                    ("ttft_ms", 10.0 * b, "ms")):
            samples = [value * (1 + spread * k) for k in (-1, 0, 1, -0.5, 0.5, 0.2, -0.2)]
            ms.append(Measurement(workload="llm-infer", preset="tiny", variant=dict(base, batch_size=b, metric=metric),
                                  unit=unit, value=value, stats=Stats.from_samples(samples),
                                  higher_is_better=metric != "ttft_ms"))
    return ResultSet(host={}, device={"type": "cpu", "product": label}, measurements=ms, label=label, complete=True)


SLOW = [(1, 50.0, 50.0), (4, 40.0, 160.0), (16, 20.0, 320.0)]
FAST = [(1, 80.0, 80.0), (4, 60.0, 240.0), (16, 30.0, 480.0)]


def test_compare_gives_the_gap_at_equal_interactivity():
    comp = compare_mod.compare([infer_set("slow", SLOW), infer_set("fast", FAST)], interactivity=[45.0])
    f = comp.frontiers
    assert {(c.platform, c.y_metric) for c in f.curves} == {(0, "output_tokens_per_s"), (1, "output_tokens_per_s")}
    at45, top = f.gaps
    # slow: between (40, 160) and (50, 50) -> 105; fast: between (30, 480) and (60, 240) -> 360
    assert at45.level == 45.0
    assert at45.values[0].y == pytest.approx(105.0) and at45.values[1].y == pytest.approx(360.0)
    assert at45.gaps[1].pct == pytest.approx(360 / 105 * 100 - 100)
    assert at45.gaps[1].significant is True
    assert top.level is None and top.gaps[1].pct == pytest.approx(50.0)  # 480 vs 320 at the highest throughput
    # default levels: where both curves reach (20..50 for slow, 30..80 for fast -> 30..50)
    comp2 = compare_mod.compare([infer_set("slow", SLOW), infer_set("fast", FAST)])
    assert [g.level for g in comp2.frontiers.gaps] == pytest.approx([30.0, math.sqrt(1500.0), 50.0, None])
    # beyond a frontier: not reached, never extrapolated
    comp3 = compare_mod.compare([infer_set("slow", SLOW), infer_set("fast", FAST)], interactivity=[70.0])
    assert comp3.frontiers.gaps[0].values[0] is None and comp3.frontiers.gaps[0].gaps[1].status == "baseline not reached"


def test_series_differ_by_everything_but_the_point():
    a = infer_set("a", SLOW)
    b = infer_set("b", FAST, dtype="fp32")  # another precision: another curve, no gap between the two
    comp = compare_mod.compare([a, b])
    assert len(comp.frontiers.curves) == 2 and comp.frontiers.gaps == []


def test_every_format_shows_it_and_html_draws_the_curves():
    comp = compare_mod.compare([infer_set("slow", SLOW), infer_set("fast", FAST)], interactivity=[45.0])
    term = render(None, format="terminal", comparison=comp)
    assert "equal interactivity" in term and "45 tokens/s per user" in term and "+242.9%" in term
    md = render(None, format="md", comparison=comp)
    assert "+242.9%" in md and "Static batching" in md
    doc = json.loads(render(None, format="json", comparison=comp))
    g = doc["frontiers"]["gaps"][0]
    assert g["at_tokens_per_s_per_user"] == 45.0 and g["gaps"]["fast"]["gap_pct"] == pytest.approx(242.857, rel=1e-4)
    assert g["gaps"]["fast"]["text"] == "+242.9%"
    html = render(None, format="html", comparison=comp)
    assert html.count('aria-label="llm-infer tiny transformers bf16 32→8 tokens static batching"') == 1
    assert html.count("<polyline") == 2  # one frontier per platform
    assert "Throughput and interactivity" in html


def test_a_published_curve_is_drawn_and_compared_at_its_interactivity():
    # lines up with the b200 InferenceX points of specs/references.toml (llama3-70b fp8 1k/1k, total tokens/s)
    base = {"model": "llama3-70b", "dtype": "fp8", "input_len": 1024, "output_len": 1024}
    ms = []
    for b, x, y in ((32, 120.0, 1000.0), (128, 70.0, 3000.0), (256, 40.0, 4000.0)):
        for metric, value in (("total_tokens_per_s", y), ("tokens_per_s_per_user", x), ("output_tokens_per_s", y / 2)):
            ms.append(Measurement(workload="llm-infer", variant=dict(base, batch_size=b, metric=metric),
                                  unit="tokens/s", value=value, stats=Stats.from_samples([value] * 7)))
    mine = ResultSet(host={}, device={"type": "cuda", "product": "mine"}, measurements=ms, label="mine", complete=True)
    comp = compare_mod.compare([mine], refs=["b200"], baseline="mine")
    ref_curves = [c for c in comp.frontiers.curves if c.reference]
    assert len(ref_curves) == 1 and [p.x for p in ref_curves[0].frontier] == [76.0, 108.0]
    gaps = [g for g in comp.frontiers.gaps if g.y_metric == "total_tokens_per_s" and g.level is not None]
    assert [g.level for g in gaps] == pytest.approx([76.0, math.sqrt(76.0 * 108.0), 108.0])
    # mine at 76 tok/s/user: between (70, 3000) and (120, 1000) -> 2760; the reference says 4431.4
    g76 = gaps[0]
    assert g76.values[0].y == pytest.approx(2760.0) and g76.values[1].y == pytest.approx(4431.4)
    assert g76.gaps[1].pct == pytest.approx((4431.4 / 2760.0 - 1) * 100) and g76.gaps[1].overlap is None
    assert not any(m.workload == "llm-infer" and m.variant.get("metric") == "total_tokens_per_s"
                   for p in comp.platforms if p.reference for m in p.result_set.measurements)
    html = render(None, format="html", comparison=comp)
    assert 'stroke-dasharray="5 4"' in html  # the published curve, dashed


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_the_curves_render_in_headless_chromium_with_labels_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    comp = compare_mod.compare([infer_set(evil, SLOW), infer_set("fast", FAST)], interactivity=[45.0])
    page = tmp_path / "report.html"
    page.write_text(render(None, format="html", comparison=comp), encoding="utf-8")
    p = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
                        "--v=0", "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [ln for ln in p.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln] == []
    dom = p.stdout
    assert dom.count("<polyline") == 2 and "Throughput and interactivity" in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and "<script>" not in dom
