"""Strings from users and files are shown, never obeyed: a label, a host or device name, a workload, a variant
value, a reason or a scanned path holding terminal escapes (CSI, OSC title and hyperlink), C1 controls, carriage
returns or backspaces reaches no output raw; rich markup in them stays text; Markdown cells keep their table;
CSV text cells are never formulas. Real results files and real `python -m gapbench` processes."""

import csv
import io
import json
import re

import pytest

from compare_fixtures import cpu_device, gemm, membw, result_set, write
from conftest import gapbench
from gapbench.results import Measurement
from gapbench.text import json_printable, printable

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
LINK = "\x1b]8;;http://x.example\x1b\\"
EVIL = f"{CLEAR}{TITLE}{LINK}\x9bK\rover\bwrite\x7f[bold red]red[/][link=http://x.example]l[/link]"
# what must never reach an output raw: C0 controls but the newline, DEL, C1 controls
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _raw(text: str) -> list[str]:
    return sorted({repr(c) for c in RAW.findall(text)})


def _evil_files(tmp_path, label_a="a" + EVIL, label_b="b" + EVIL):
    dev = cpu_device(product="CPU" + EVIL)
    dev["env"] = {"OMP_NUM_THREADS": "2" + EVIL}
    weird = Measurement(workload="w" + EVIL, preset="tiny", variant={"kind": "v" + EVIL}, unit="u" + EVIL, value=2.0,
                        metrics={"note": EVIL})
    failed = gemm(None, dtype="bf16", status="error", reason="failed: " + EVIL)
    host = {"hostname": "host" + EVIL, "cpu": "cpu" + EVIL}
    files = []
    for name, label, value in (("a", label_a, 1.0), ("b", label_b, 0.5)):
        rs = result_set([gemm(value), membw(10.0), weird, failed], device=dev, label=label)
        rs.host = host
        files.append(write(rs, tmp_path / f"{name}.json"))
    return files


def test_printable_shows_every_control_and_keeps_unicode():
    assert printable(CLEAR) == "\\x1b[2J"
    assert printable(TITLE) == "\\x1b]0;pwned\\x07"
    assert printable("\x9b\x7f\r\b\t\x00") == "\\x9b\\x7f\\r\\x08\\t\\x00"
    assert printable("a\nb") == "a\\nb" and printable("a\nb", keep_newlines=True) == "a\nb"
    assert printable("abc\u202edef\u2066") == "abc\\u202edef\\u2066"  # marks that reorder a line
    ordinary = "Ryzen™ 9 — 中文 ü é\u00a0ß 🚀 µs"
    assert printable(ordinary) == ordinary
    assert printable(printable(EVIL)) == printable(EVIL)
    assert json.loads(json_printable(json.dumps({"k": "\x9b\x7f\u2028"}, ensure_ascii=False))) == {"k": "\x9b\x7f\u2028"}
    assert not _raw(json_printable(json.dumps({"k": EVIL}, ensure_ascii=False)))


def test_compare_in_the_terminal_shows_controls_and_reads_no_markup(tmp_path):
    a, b = _evil_files(tmp_path)
    p = gapbench("compare", a, b)
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout) and not _raw(p.stderr), (_raw(p.stdout), _raw(p.stderr))
    assert "\\x1b[2J" in p.stdout and "\\x1b]0;pwned\\x07" in p.stdout and "\\x9bK" in p.stdout
    assert "[bold red]red[/]" in p.stdout.replace("\n", "")  # markup in a name stays text
    # the same through --label, and through the warnings on standard error
    p = gapbench("compare", a, b, "--label", "x" + EVIL, "--label", "y[link=http://x.example]l[/link]" + CLEAR)
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout) and not _raw(p.stderr)
    assert "y[link=http://x.example]l[/link]\\x1b[2J" in p.stdout.replace("\n", "")


def test_compare_markdown_keeps_its_table_and_shows_controls(tmp_path):
    a, b = _evil_files(tmp_path, label_a="left|pipe\nnew line" + EVIL, label_b="right" + EVIL)
    p = gapbench("compare", a, b, "--format", "md")
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout) and not _raw(p.stderr)
    table = [line for line in p.stdout.splitlines() if line.startswith("|")]
    cells = {len(re.findall(r"(?<!\\)\|", line)) for line in table[:5]}
    assert len(cells) == 1, table[:5]  # every row of the gap table has the header's cells: no | or newline broke one
    assert "left\\|pipe new line\\x1b[2J" in p.stdout and "&lt;" not in p.stdout.split("|")[0]


def test_compare_csv_has_no_formula_and_no_control_and_numbers_stay_numbers(tmp_path):
    a, b = _evil_files(tmp_path, label_a="=HYPERLINK(\"http://x.example\",\"click\")", label_b="@SUM(A1:A9)")
    m = Measurement(workload="+cmd|' /C calc'!A0", variant={"dtype": "fp32"}, unit="-x", value=3.0)
    c = write(result_set([m, gemm(2.0)], label="-2+3" + EVIL), tmp_path / "c.json")
    p = gapbench("compare", a, b, c, "--format", "csv")
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout)
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert {r["platform"] for r in rows} == {"'=HYPERLINK(\"http://x.example\",\"click\")", "'@SUM(A1:A9)",
                                              "'-2+3" + printable(EVIL)}
    assert "'+cmd|' /C calc'!A0" in {r["workload"] for r in rows} and "'-x" in {r["unit"] for r in rows}
    for r in rows:
        for k in ("workload", "unit", "platform", "reason", "status", "bound", "variant"):
            assert not r[k].startswith(("=", "+", "-", "@")), (k, r[k])
    gaps = [r["gap_pct"] for r in rows if r["gap_pct"]]
    assert any(g.startswith("-") for g in gaps)  # a negative number is a number, never quoted
    assert all(float(g) == float(g) for g in gaps)


def test_compare_json_escapes_every_control(tmp_path):
    a, b = _evil_files(tmp_path)
    p = gapbench("compare", a, b, "--json")
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout) and not _raw(p.stderr)
    d = json.loads(p.stdout)
    assert d["platforms"][0]["name"] == "a" + EVIL  # the value itself is kept


def test_the_html_report_escapes_what_it_shows(tmp_path):
    a, b = _evil_files(tmp_path, label_a="<script>alert(1)</script>", label_b='b"><img src=x onerror=alert(1)>')
    out = tmp_path / "r.html"
    p = gapbench("report", a, b, "-o", out)
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_report_text_formats_show_controls(tmp_path):
    a, b = _evil_files(tmp_path)
    for fmt in ("md", "csv"):
        out = tmp_path / f"r.{fmt}"
        p = gapbench("report", a, b, "-o", out, "--format", fmt)
        assert p.returncode == 0, p.stderr
        assert not _raw(out.read_text()), fmt
    from gapbench.report import render

    text = render([a, b], format="terminal")
    assert not _raw(text) and "\\x1b]0;pwned\\x07" in text


def test_the_history_listing_shows_controls(tmp_path):
    a, _ = _evil_files(tmp_path)
    db = tmp_path / "h.sqlite"
    p = gapbench("history", "--db", db, "--import", a)
    assert p.returncode == 0, p.stderr
    p = gapbench("history", "--db", db)
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout) and "w\\x1b[2J" in p.stdout
    p = gapbench("history", "--db", db, "--workload", "gemm")
    assert p.returncode == 0, p.stderr
    assert not _raw(p.stdout) and not _raw(p.stderr) and "\\x1b" in p.stdout


def test_a_runs_table_shows_controls():
    """The table `gapbench run` prints (report.runs.results_table), even through a plain rich console."""
    from rich.console import Console

    from gapbench.report.kit import rich_table
    from gapbench.report.runs import results_table

    rs = result_set([gemm(1.0), gemm(None, dtype="bf16", status="error", reason="x" + EVIL),
                     Measurement(workload="w" + EVIL, variant={"v": EVIL}, unit="u" + EVIL, value=1.0)],
                    device=cpu_device(product="P" + EVIL), label="L" + EVIL)
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    console.print(rich_table(results_table(rs)))
    assert not _raw(buf.getvalue()) and "L\\x1b[2J" in buf.getvalue()


def test_the_verbs_consoles_show_controls_whatever_they_print():
    from rich.text import Text

    from gapbench.cli._output import ShownConsole

    buf = io.StringIO()
    console = ShownConsole(file=buf, width=200, color_system="truecolor", force_terminal=True, highlight=False)
    console.print(Text("plain" + CLEAR + TITLE, style="red"))
    console.print("name " + CLEAR + ":pile_of_poo:", markup=False)
    out = buf.getvalue()
    assert "plain\\x1b[2J\\x1b]0;pwned" in out and "name \\x1b[2J:pile_of_poo:" in out
    assert CLEAR not in out and "\x07" not in out and "\x1b[31m" in out  # its own colours still reach the terminal


@pytest.fixture
def evil_tree(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / f"k{TITLE}\x9b.cu").write_text(f"void f() {{ cudaMalloc(&p, 4); /* {CLEAR}\x9b */ }}\n", encoding="utf-8")
    (root / "m.py").write_text(f"import torch\ntorch.cuda.synchronize()  # {CLEAR}\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("fmt", ["table", "md", "json", "sarif"])
def test_scan_outputs_show_controls(evil_tree, fmt):
    p = gapbench("scan", evil_tree, "--format", fmt)
    assert p.returncode in (0, 1), p.stderr
    assert not _raw(p.stdout) and not _raw(p.stderr), _raw(p.stdout)
    if fmt in ("json", "sarif"):
        json.loads(p.stdout)
        assert "\\u001b" in p.stdout and "\\u009b" in p.stdout
    else:
        assert "\\x1b" in p.stdout  # the path shown with its escapes (a table cell may fold it)
    if fmt == "md":
        assert "k\\x1b]0;pwned\\x07\\x9b.cu" in p.stdout
