"""The compare, report and specs verbs: output, formats, exit codes (a real subprocess for each verb's main
paths; the same CLI entry point in-process for the many bad-input cases, to keep the set fast)."""

import csv
import io
import json

from compare_fixtures import gemm, gpu_device, membw, result_set, write
from conftest import gapbench
from gapbench.cli import main as cli_main


class _Done:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def inproc(capsys, *args):
    """The CLI entry point in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in args])
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    out = capsys.readouterr()
    return _Done(rc, out.out, out.err)


def _files(tmp_path):
    a = write(result_set([gemm(1.0), membw(10.0)], label="one"), tmp_path / "one.json")
    b = write(result_set([gemm(2.0), membw(10.1, spread=1.0)], label="two"), tmp_path / "two.json")
    return a, b


def test_compare_terminal_and_formats(tmp_path, capsys):
    a, b = _files(tmp_path)
    p = gapbench("compare", a, b)
    assert p.returncode == 0, p.stderr
    assert "gap against one" in p.stdout and "+100.0%" in p.stdout and "compute-bound: two leads" in p.stdout

    def gapbench_(*args):
        return inproc(capsys, *args)

    p = gapbench_("compare", a, b, "--format", "md", "--baseline", b)
    assert p.returncode == 0 and "gap one" in p.stdout and "−50.0%" in p.stdout
    p = gapbench_("compare", a, b, "--format", "csv", "--label", "x", "--label", "y")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert {r["platform"] for r in rows} == {"x", "y"}
    p = gapbench_("compare", a, b, "--json", "--price", "two=0.5")
    d = json.loads(p.stdout)
    assert d["platforms"][1]["price_usd_per_hour"] == 0.5
    assert d["rows"][0]["cells"]["two"]["per_dollar"] == 2.0 * 3600 / 0.5


def test_compare_against_a_reference(tmp_path):
    from gapbench.results import Measurement

    sweep = Measurement(workload="gemm", variant={"dtype": "bf16", "sweep": "max"}, unit="TFLOP/s", value=600.0)
    f = write(result_set([sweep], device=gpu_device("AMD Instinct MI300X"), label="mine"), tmp_path / "m.json")
    p = gapbench("compare", f, "--ref", "h100-sxm", "--format", "md")
    assert p.returncode == 0, p.stderr
    assert "h100-sxm (published) (baseline)" in p.stdout and "794.5" in p.stdout
    assert "−24.5%*" in p.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    a, b = _files(tmp_path)
    p = gapbench("compare", a, "--ref", "nonexistent")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "known: h100-sxm" in p.stderr

    def gapbench_(*args):
        return inproc(capsys, *args)

    p = gapbench_("compare", tmp_path / "missing.json")
    assert p.returncode == 2 and "missing.json" in p.stderr and p.stderr.count("\n") == 1
    old = tmp_path / "old.json"
    d = json.loads(open(a).read())
    d["schema_version"] = 0
    old.write_text(json.dumps(d))
    p = gapbench_("compare", a, old)
    assert p.returncode == 2 and "schema_version" in p.stderr and "Traceback" not in p.stderr
    p = gapbench_("compare", a, b, "--price", "nobody=3")
    assert p.returncode == 2 and "match no input" in p.stderr
    p = gapbench_("compare", a, b, "--price", "garbage")
    assert p.returncode == 2
    p = gapbench_("compare")
    assert p.returncode == 2 and "nothing to compare" in p.stderr


def test_different_suites_warn_but_compare(tmp_path, capsys):
    a = write(result_set([gemm(1.0)], label="a", suite="quick"), tmp_path / "a.json")
    b = write(result_set([gemm(1.0)], label="b", suite="standard"), tmp_path / "b.json")
    p = inproc(capsys, "compare", a, b, "--format", "md")
    assert p.returncode == 0 and "different suites" in p.stderr


def test_report_writes_html(tmp_path, capsys):
    a, b = _files(tmp_path)
    out = tmp_path / "out" / "report.html"
    p = gapbench("report", a, b, "-o", out)
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    p = inproc(capsys, "report", a, b, "-o", tmp_path / "r.md")
    assert p.returncode == 0 and (tmp_path / "r.md").read_text().startswith("### Gap against")
    p = inproc(capsys, "report", tmp_path / "nope.json", "-o", out)
    assert p.returncode == 2


def test_specs_table_and_json(capsys):
    p = gapbench("specs", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    keys = {s["key"] for s in d["accelerators"]}
    assert {"h100-sxm", "mi300x", "gaudi3", "ascend-910b"} <= keys
    assert d["this_cpu"]["estimate"] is True
    p = inproc(capsys, "specs", "--refs")
    assert p.returncode == 0 and "h100-sxm" in p.stdout and "as reported" in p.stdout


def test_a_label_naming_another_stack_is_a_loud_warning():
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "results"
    one, two = results / "cpu-epyc-2core-quick-1thread.json", results / "cpu-epyc-2core-quick-2threads.json"
    p = gapbench("compare", "--label", "ROCm MI300X", one, "--label", "cpu 2t", two, "--json")
    assert p.returncode == 0, p.stderr
    assert ("--label 'ROCm MI300X' names the rocm stack, but " in p.stderr
            and "ran on cpu (AMD EPYC)" in " ".join(p.stderr.split()))
    assert "'cpu 2t'" not in p.stderr  # a label that names the stack its file ran on is fine
