"""Renderers: every format, escaping of text from result files, and the HTML page in a real headless Chromium."""

import csv
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from compare_fixtures import gemm, gpu_device, latency, membw, result_set
from gapbench.compare import compare
from gapbench.errors import GapbenchError
from gapbench.report import render

EVIL = "<script>alert(1)</script>"


def _pair():
    a = result_set([gemm(1.0), gemm(1.0, dtype="bf16"), membw(10.0), latency(10.0),
                    gemm(None, dtype="fp16", status="too_slow", reason="2.8 s per iteration")], label="one")
    b = result_set([gemm(2.0), gemm(1.02, dtype="bf16", spread=0.1), membw(9.0), latency(5.0),
                    gemm(None, dtype="fp16", status="error", reason="boom " + EVIL)], label="two")
    return [a, b]


def _evil_pair():
    cov = {"summary": {"total": 1, "native": 1, "native_pct": 100.0}, "families": {EVIL: {"total": 1, "native": 0}}}
    fw = [{"framework": EVIL, "version": "1", "status": "error", "device": "cpu", "reason": EVIL}]
    a = result_set([gemm(1.0), Measurement_evil()], label=EVIL, coverage=cov, frameworks=fw)
    a.host["hostname"] = EVIL
    b = result_set([gemm(2.0, dtype=EVIL)], label="fine & dandy", device=gpu_device(f"NVIDIA {EVIL}"))
    return [a, b]


def Measurement_evil():
    from gapbench.results import Measurement

    return Measurement(workload=EVIL, variant={EVIL: EVIL}, unit=EVIL, status="wrong_result", reason=EVIL)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_markdown_table_and_takeaway():
    md = render(_pair(), format="md")
    assert "| workload | unit | bound | one (baseline) | % peak | two | % peak | gap two |" in md
    assert "+100.0%" in md and "≈ +2.0%" in md
    assert re.search(r"decode-latency batch=1 \| ms \(lower is better\) .*\+100\.0%", md)
    assert "- two vs one:" in md
    assert "too_slow" in md and "#### Failures" in md


def test_csv_is_long_format_and_parses():
    rows = list(csv.DictReader(io.StringIO(render(_pair(), format="csv"))))
    assert len(rows) == 5 * 2
    g = next(r for r in rows if r["platform"] == "two" and r["workload"] == "gemm" and '"fp32"' in r["variant"])
    assert float(g["gap_pct"]) == pytest.approx(100.0) and g["significant"] == "True"
    base = next(r for r in rows if r["platform"] == "one" and r["workload"] == "gemm" and '"fp32"' in r["variant"])
    assert base["baseline"] == "True" and base["gap_pct"] == ""


def test_json_and_terminal():
    d = json.loads(render(_pair(), format="json"))
    assert d["baseline"] == "one" and len(d["rows"]) == 5
    term = render(_pair(), format="terminal")
    assert "gap against one" in term and "+100.0%" in term and "\x1b[" not in term
    with pytest.raises(GapbenchError, match="unknown format"):
        render(_pair(), format="pdf")


def test_html_escapes_everything_from_result_files():
    html = render(_evil_pair(), format="html")
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    p = _Collect()
    p.feed(html)
    assert "script" not in p.tags
    text = "".join(p.text)
    assert EVIL in text  # shown, as text
    assert "fine & dandy" in text
    md = render(_evil_pair(), format="md")
    assert EVIL not in md


def test_html_is_self_contained():
    html = render(_pair(), format="html")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", html)
    assert "<script" not in html.lower()
    assert html.count("<svg") >= 2  # gap bars + at least one roofline
    for section in ("Gap table", "Gaps", "Roofline", "Failures", "Environment", "Efficiency"):
        assert f"<h2>{section}</h2>" in html
    assert "2.8 s per iteration" in html


def test_roofline_uses_spec_peaks_for_a_known_device():
    h = result_set([gemm(600.0, dtype="bf16", size=4096), membw(3000.0)], device=gpu_device("NVIDIA H100 80GB HBM3"),
                   label="h100")
    html = render([h], format="html")
    assert "bf16 peak 989.4 TFLOP/s" in html and "memory 3.35 TB/s" in html


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _run_chromium(path, tmp_path):
    """Load a file in headless Chromium; return (dumped DOM, console lines from the log)."""
    exe = _chromium()
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'chrome-profile'}", "--enable-logging=stderr", "--v=0", "--log-level=0",
           "--virtual-time-budget=2000", "--dump-dom", path.as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    console = [ln for ln in p.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    return p.stdout, console


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_html_renders_in_headless_chromium_without_console_errors(tmp_path):
    # control: the method must see a console error when there is one (CSP-blocked script and image)
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
                   "'none'\"></head><body><script>x()</script><img src=\"http://example.invalid/a.png\"></body></html>")
    _, console = _run_chromium(bad, tmp_path)
    assert console, "the console capture saw nothing on a page that must log errors"

    page = tmp_path / "report.html"
    page.write_text(render(_evil_pair() + [_pair()[1]], format="html", labels=None), encoding="utf-8")
    dom, console = _run_chromium(page, tmp_path)
    assert console == [], console
    assert "<h2>Gap table</h2>" in dom and "<svg" in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "<script>" not in dom


VERDICTS = Path(__file__).resolve().parents[1] / "results" / "cpu-epyc-2core-verdicts"


def _busy_pair():
    """t2-1.json's runs were measured on a busy host: the host watch flagged some of its rows."""
    return [str(VERDICTS / "t1-1.json"), str(VERDICTS / "t2-1.json")]


def test_markdown_says_the_host_watch_reason_of_each_flagged_row_and_which_spread_judged():
    md = render(None, format="md", comparison=compare(_busy_pair(), history=False))
    assert "Judged by: runs + session drift (cpu default) (" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| AMD EPYC [t2-1] | gemm fp32 1024x1024x1024 |"))
    assert "host busy: other processes took" in line


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_html_says_the_host_watch_reason_of_each_flagged_row_and_which_spread_judged(tmp_path):
    page = tmp_path / "busy.html"
    page.write_text(render(None, format="html", comparison=compare(_busy_pair(), history=False)), encoding="utf-8")
    dom, console = _run_chromium(page, tmp_path)
    assert console == [], console
    assert "Judged by: runs + session drift (cpu default) (" in dom
    row = next(r for r in dom.split("<tr>") if "gemm fp32 1024x1024x1024" in r and "host busy" in r)
    assert "AMD EPYC [t2-1]" in row


def test_compare_object_can_be_rendered_directly():
    comp = compare(_pair())
    assert render(None, format="md", comparison=comp) == render(_pair(), format="md")


def test_terminal_shows_rich_markup_in_labels_literally():
    a = result_set([gemm(1.0)], label="[red]x[/] [/]")
    b = result_set([gemm(2.0)], label="[bold]b")
    term = render([a, b], format="terminal")
    assert "gap against [red]x[/] [/]" in term and "[bold]b" in term
