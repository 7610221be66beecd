"""What a buyer reads: one CPU peak for every verb, gaps far apart said as ratios, rows classified by their own
device's roofline, and the HTML report (verdict first, marks defined once, charts whose text fits, a roofline
with a legend and fixed dtype colours), checked in a real headless Chromium with screenshots."""

import json
import re
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest

from compare_fixtures import cpu_device, gemm, result_set
from gapbench import specs
from gapbench.compare import compare, platform_identity
from gapbench.report import render
from gapbench.report.kit import MARKS, fmt_gap_value, gap_text
from gapbench.report.svg import CHAR_W, DTYPE_COLORS, gap_bars, roofline
from gapbench.results import load

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "results" / "cpu-xeon-2core-numerics-fp32-2threads.json"  # a VM: nominal clock + measured
QUICK = [ROOT / "results" / "cpu-epyc-2core-quick-1thread.json", ROOT / "results" / "cpu-epyc-2core-quick-2threads.json"]


# ---- one CPU peak ---------------------------------------------------------------------------------------

def test_the_cpu_peak_is_one_function_of_the_recorded_host_facts():
    rs = load(MEASURED)
    assert rs.host["cpufreq"] is False and rs.host["cpu_measured_mhz"] > rs.host["cpu_max_mhz"]
    spec = specs.cpu_spec(specs.cpu_identity(rs.host, rs.device))
    assert spec.clock_source == specs.CLOCK_MEASURED and spec.clock_mhz == rs.host["cpu_measured_mhz"]
    assert "(measured)" in spec.notes and "nominal 2200 MHz" in spec.notes
    # compare (and so report and run's table, which go through the same identity) computes the same peak
    assert specs.match(platform_identity(rs)).tflops == spec.tflops
    assert compare([rs]).platforms[0].spec.tflops == spec.tflops


def test_specs_verb_uses_the_clock_a_run_would_record(tmp_path):
    from gapbench import devices

    facts = devices.host_identity()
    out = subprocess.run([sys.executable, "-m", "gapbench", "specs", "--json"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    cpu = json.loads(out)["this_cpu"]
    mhz, source = specs.cpu_clock(specs.cpu_identity(facts))
    assert cpu["clock_source"] == source and source
    if facts.get("cpu_measured_mhz") and not facts.get("cpufreq"):  # a VM without cpufreq: the measured clock
        assert source == specs.CLOCK_MEASURED and cpu["clock_mhz"] == pytest.approx(facts["cpu_measured_mhz"])
    assert f"({source})" in cpu["notes"]


def test_a_cpu_bf16_and_fp16_peak_come_from_its_isa():
    base = {"type": "cpu", "product": "x", "cores": 1, "cpu_max_mhz": 1000.0, "cpufreq": True}
    avx2 = specs.cpu_spec({**base, "isa": ["avx", "avx2", "fma"]}).tflops
    bf16 = specs.cpu_spec({**base, "isa": ["avx", "avx2", "fma", "avx512f", "avx512_bf16"]}).tflops
    amx = specs.cpu_spec({**base, "isa": ["avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"]}).tflops
    assert avx2["bf16"] == avx2["fp32"] == 0.032  # no bf16 unit: converted, the fp32 rate at best
    assert bf16["bf16"] == 2 * bf16["fp32"] == 0.128 and bf16["fp16"] == bf16["fp32"]
    assert amx["bf16"] == 1.024 and amx["fp16"] == 0.128 and amx["int8"] == 2.048
    assert specs.cpu_spec({**base, "isa": ["fma"], "cpufreq": None}).clock_source == specs.CLOCK_REPORTED


# ---- ratios and ridge points --------------------------------------------------------------------------------

def test_a_gap_far_apart_is_said_as_a_ratio():
    assert fmt_gap_value(0.37 / 794.5 * 100 - 100) == "×2,100 slower"
    assert fmt_gap_value(3400.0) == "×35 faster" and fmt_gap_value(-89.0) == "−89.0%"
    mine = result_set([gemm(0.37, dtype="bf16", size=4096)], device=cpu_device())
    mine.measurements[0].variant["sweep"] = "max"
    comp = compare([mine], refs=["h100-sxm"])
    row = next(r for r in comp.rows if r.gaps)
    g = next(iter(row.gaps.values()))
    assert gap_text(g) == "×2,100 slower*"
    assert "×2,100 slower" in render(None, format="terminal", comparison=comp)
    assert "−100.0%" not in render(None, format="md", comparison=comp)


def test_a_row_is_classified_by_its_own_devices_ridge_never_the_references():
    mine = result_set([gemm(0.9, dtype="bf16", size=1024)], device=cpu_device())
    mine.measurements[0].variant["sweep"] = "max"
    comp = compare([mine], refs=["h100-sxm"])
    row = next(r for r in comp.rows if r.cells[0].status == "ok")
    assert row.intensity < 295 and row.bound == "compute"  # 170 FLOP/byte: under the H100's bf16 ridge (295)
    assert all("h100" not in src for _, _, src in comp.takeaway.ridges)


# ---- the HTML report --------------------------------------------------------------------------------------

def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _screenshot(page: Path, png: Path, tmp_path: Path, width: int = 1400, height: int = 2400) -> None:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-extensions", "--disable-background-networking", "--disable-component-update",
           f"--user-data-dir={tmp_path / 'chrome-profile'}", f"--window-size={width},{height}",
           f"--screenshot={png}", page.as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and png.stat().st_size > 10_000, p.stderr[-2000:]


def _texts(svg: str) -> list[tuple[float, float, str, str]]:
    """(x, y, anchor, text) of every <text> of an SVG."""
    out = []
    for m in re.finditer(r'<text x="([\d.]+)" y="([\d.]+)"([^>]*)>([^<]*)</text>', svg):
        anchor = "end" if 'text-anchor="end"' in m.group(3) else "middle" if "middle" in m.group(3) else "start"
        out.append((float(m.group(1)), float(m.group(2)), anchor, m.group(4)))
    return out


def _extent(x: float, anchor: str, text: str) -> tuple[float, float]:
    w = len(text) * CHAR_W
    return {"start": (x, x + w), "end": (x - w, x), "middle": (x - w / 2, x + w / 2)}[anchor]


def test_the_gap_chart_fits_its_text():
    long = "a-workload-with-a-very-long-name-that-used-to-be-cut"
    a = result_set([gemm(1.0), gemm(1.0, dtype="bf16", size=2048)], label="one platform with a long name")
    b = result_set([gemm(2.0), gemm(0.001, dtype="bf16", size=2048)], label="another platform, also long")
    for rs in (a, b):
        rs.measurements[0] = rs.measurements[0].model_copy(update={"workload": long})
    svg = gap_bars(compare([a, b]))
    width = float(re.search(r'width="(\d+)"', svg).group(1))
    texts = _texts(svg)
    assert any(long in t for *_, t in texts) and not any(t.endswith("…") for *_, t in texts)
    for x, _, anchor, t in texts:
        lo, hi = _extent(x, anchor, t)
        assert lo >= 0 and hi <= width, (t, lo, hi, width)
    assert any("×1,000 slower" in t for *_, t in texts)


def test_roofline_has_a_legend_labels_apart_and_a_colour_per_dtype_in_every_report():
    def plot(dtypes):
        rs = result_set([gemm(0.1 * (k + 1), dtype=d) for k, d in enumerate(dtypes)],
                        device={**cpu_device(), "isa": ["avx512f", "avx512_bf16"], "cpu_max_mhz": 3000.0,
                                "cpufreq": True})
        return roofline(compare([rs]), 0)

    one, other = plot(["fp32", "bf16", "fp16"]), plot(["bf16", "fp16", "fp32"])
    for svg in (one, other):
        assert f'fill="{DTYPE_COLORS["bf16"]}"' in svg and f'fill="{DTYPE_COLORS["fp32"]}"' in svg
        assert "dot: a measurement" in svg  # the legend
        labels = [(y, t) for _, y, _, t in _texts(svg) if " peak " in t]
        assert labels and "fp32/fp16 peak" in " ".join(t for _, t in labels)  # equal peaks share one label
        ys = sorted(y for y, _ in labels)
        assert all(b - a >= 13 for a, b in zip(ys, ys[1:], strict=False)), labels
    colour = re.compile(r'<circle cx="[\d.]+" cy="[\d.]+" r="4" fill="(#\w+)"><title>gemm (\w+)')
    assert dict((d, c) for c, d in colour.findall(one)) == dict((d, c) for c, d in colour.findall(other))


def test_report_defines_each_mark_once_and_names_an_intervals_coverage():
    a, b = (load(p) for p in QUICK)
    html = render([a, b], format="html")
    assert html.index("<h2>Verdict</h2>") < html.index("<h2>Inputs</h2>")
    assert "confidence intervals overlap" not in html
    assert html.count(escape(MARKS["≈"])) == 1
    assert "75% CI" in html and not re.search(r"\] 75%(?! CI)", html)
    md = render([a, b], format="md")
    assert md.count(MARKS["≈"]) == 1 and "% of peak)" not in md  # Markdown keeps its own % peak column
    term = render([a, b], format="terminal")
    assert "75% CI" in term and "of peak)" in term


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_report_top_and_roofline_render_in_chromium(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render([str(p) for p in QUICK], format="html", refs=["h100-sxm"]), encoding="utf-8")
    top, full = tmp_path / "top.png", tmp_path / "full.png"
    _screenshot(page, top, tmp_path, height=900)
    _screenshot(page, full, tmp_path, height=3200)
    pytest.importorskip("PIL")
    from PIL import Image

    with Image.open(top) as im:
        box = im.convert("RGB").getbbox()
        assert box is not None and im.size == (1400, 900)
        # the verdict box's pale blue background is drawn near the top of the page
        assert any(im.getpixel((x, y))[:3] == (0xF6, 0xF8, 0xFB) for x in range(40, 600, 20) for y in range(80, 260, 4))
