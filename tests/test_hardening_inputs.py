"""Bad input is answered as bad input: every hostile results file, journal and number a user can give ends
in one line and exit code 2 (or is read correctly), never an internal error, a traceback or a hang."""

import json
import math
import os
import time

import pytest

from compare_fixtures import gemm, membw, result_set, write
from conftest import REPO, gapbench
from gapbench.cli import main as cli_main
from gapbench.errors import ResultFileError
from gapbench.report import render
from gapbench.results import MAX_FILE_BYTES, Measurement, ResultSet, load, schema


def cli(capsys, *args):
    """(exit code, stdout, stderr) of the CLI entry point in this process."""
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(rc, err, *words):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in err and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], lines[0]


def strict_json(text):
    def refuse(c):
        raise ValueError(f"{c} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def good(tmp_path):
    return write(result_set([gemm(1.0), membw(10.0), gemm(None, dtype="tf32", status="unsupported",
                                                            reason="no TF32 here")], label="good"),
                 tmp_path / "good.json")


def doc_of(path):
    return json.loads(open(path).read())


def put(tmp_path, doc, name="bad.json") -> str:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def reading_verbs(f, good, tmp_path):
    return [["compare", f, good], ["compare", "--json", good, f],
            ["report", f, good, "-o", tmp_path / "r.html", "--force"],
            ["history", "--import", f, "--db", tmp_path / "h.sqlite"]]


# ---- values that break the schema: refused, naming the file and the field --------------------------------

BREAKING = [
    # (what, how to break the document as text or as data, the field named)
    ("NaN value", lambda t: t.replace('"value": 1.0', '"value": NaN', 1), "NaN and Infinity"),
    ("Infinity flops", lambda t: t.replace('"flops": 2147483648.0', '"flops": Infinity', 1), "NaN and Infinity"),
    ("a number beyond a double", lambda t: t.replace('"value": 1.0', '"value": 1e999', 1), "measurements[0].value"),
    ("a 400-digit integer", lambda t: t.replace('"value": 1.0', '"value": 1' + "0" * 400, 1), "measurements[0].value"),
    ("an integer beyond a double in metrics", lambda t: t.replace('"metrics": {', '"metrics": {"big": 1' + "0" * 400
                                                                   + ", ", 1), "measurements[0].metrics.big"),
    ("negative value", lambda d: d["measurements"][0].update(value=-2.0), "measurements[0].value"),
    ("zero value", lambda d: d["measurements"][0].update(value=0), "measurements[0].value"),
    ("boolean value", lambda d: d["measurements"][0].update(value=True), "measurements[0].value"),
    ("string value", lambda d: d["measurements"][0].update(value="12"), "measurements[0].value"),
    ("negative bytes", lambda d: d["measurements"][1].update(bytes=-1), "measurements[1].bytes"),
    ("n = 0", lambda d: d["measurements"][0]["stats"].update(n=0), "measurements[0].stats.n"),
    ("n = -3", lambda d: d["measurements"][0]["stats"].update(n=-3), "measurements[0].stats.n"),
    ("n = 2.5", lambda d: d["measurements"][0]["stats"].update(n=2.5), "measurements[0].stats.n"),
    ("n = true", lambda d: d["measurements"][0]["stats"].update(n=True), "measurements[0].stats.n"),
    ("reversed ci95", lambda d: d["measurements"][0]["stats"].update(ci95=[2.0, 1.0]), "measurements[0].stats.ci95"),
    ("min above max", lambda d: d["measurements"][0]["stats"].update(min=5.0, max=1.0), "measurements[0].stats"),
    ("null workload", lambda d: d["measurements"][0].update(workload=None), "measurements[0].workload"),
    ("null unit", lambda d: d["measurements"][1].update(unit=None), "measurements[1].unit"),
    ("schema_version true", lambda d: d.update(schema_version=True), "schema_version"),
    ("schema_version 2", lambda d: d.update(schema_version=2), "schema_version"),
    ("unknown status", lambda d: d["measurements"][1].update(status="fast"), "measurements[1].status"),
    ("variant a list", lambda d: d["measurements"][0].update(variant=[1, 2]), "measurements[0].variant"),
    ("product a number", lambda d: d["device"].update(product=7), "device.product"),
    ("isa a string", lambda d: d["host"].update(isa="avx2"), "host.isa"),
    ("clock a string", lambda d: d["host"].update(cpu_max_mhz="2000"), "host.cpu_max_mhz"),
    ("label an object", lambda d: d.update(label={"x": 1}), "label"),
    ("stats incomplete", lambda d: d["measurements"][0].update(stats={"median": 1}), "measurements[0].stats"),
    ("coverage count a string", lambda d: d.update(coverage={"summary": {"total": "many"}}), "coverage.summary.total"),
    ("framework row a string", lambda d: d.update(frameworks=["torch"]), "frameworks[0]"),
    ("a lone surrogate", lambda t: t.replace('"label": "good"', '"label": "\\ud800x"', 1), "surrogate"),
    ("a lone surrogate key", lambda t: t.replace('"variant": {', '"variant": {"\\udc80": 1, ', 1), "surrogate"),
    ("nested 1,000 deep", lambda t: t.replace('"metrics": {', '"metrics": {"deep": ' + "[" * 1000 + "]" * 1000 + ", ",
                                              1), "nested more than"),
    ("a 20,000-character reason", lambda d: d["measurements"][2].update(reason="r" * 20_000), "measurements[2].reason"),
    ("truncated", lambda t: t[: len(t) // 2], "not valid JSON"),
    ("not UTF-8", lambda t: t.replace('"good"', '"\udcff"', 1), "not valid JSON"),
]


@pytest.mark.parametrize("what, breaks, field", BREAKING, ids=[b[0] for b in BREAKING])
def test_a_file_that_breaks_the_schema_is_refused_by_every_reading_verb(tmp_path, capsys, good, what, breaks, field):
    text = open(good).read()
    if breaks.__code__.co_varnames[0] == "t":
        mutated = breaks(text)
        p = tmp_path / "bad.json"
        p.write_bytes(mutated.encode("utf-8", "surrogateescape"))
        f = str(p)
    else:
        d = json.loads(text)
        breaks(d)
        f = put(tmp_path, d)
    with pytest.raises(ResultFileError) as e:
        load(f)
    assert f in str(e.value) and field in str(e.value) and "\n" not in str(e.value)
    for argv in reading_verbs(f, good, tmp_path):
        rc, out, err = cli(capsys, *argv)
        one_line_error(rc, err, f, field)


def test_unknown_fields_stay_allowed_and_known_ones_round_trip(tmp_path, capsys, good):
    d = doc_of(good)
    d["host_watch"] = {"busy": True}
    d["measurements"][0]["runs"] = [0.9, 1.0, 1.1]
    d["measurements"][0]["host_watch"] = {"flag": "noisy neighbour"}
    d["measurements"][0]["metrics"]["per_run"] = {"values": [1.0, 2.0]}
    d["measurements"][0]["stats"]["run_to_run"] = {"cv": 0.01}
    f = put(tmp_path, d, "extra.json")
    assert load(f).measurements[0].value == 1.0
    for argv in reading_verbs(f, good, tmp_path):
        rc, out, err = cli(capsys, *argv)
        assert rc == 0, err
    # the files gapbench keeps itself read back, and every one of them passes the shipped JSON Schema too
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads((REPO / "src/gapbench/results.schema.json").read_text()))
    kept = [n for n in sorted(os.listdir(REPO / "results")) if n.endswith(".json") and not n.startswith("fuzz-")
            and not n.endswith("-accuracy.json")]  # benchmark reports beside the results files
    assert len(kept) >= 7
    for name in kept:
        load(REPO / "results" / name)
        assert not list(validator.iter_errors(doc_of(REPO / "results" / name))), name


def test_the_shipped_json_schema_is_the_one_the_models_make():
    shipped = json.loads((REPO / "src/gapbench/results.schema.json").read_text())
    assert shipped == json.loads(json.dumps(schema.json_schema())), \
        "regenerate it: PYTHONPATH=src python -m gapbench.results.schema > src/gapbench/results.schema.json"


def test_values_within_the_schema_that_used_to_crash_a_verb_are_read(tmp_path, capsys, good):
    d = doc_of(good)
    d["measurements"][0]["flops"] = 10**30  # an integer SQLite cannot hold as INTEGER
    d["measurements"][0]["peak_memory_bytes"] = 2**63 - 1
    d["measurements"][0]["variant"]["note"] = "[red]markup[/] <script>alert(1)</script> \u202e"
    d["device"]["libraries"] = {"parallel": [{"deep": [1, [2, [3]]]}]}
    f = put(tmp_path, d, "edge.json")
    for argv in reading_verbs(f, good, tmp_path):
        rc, out, err = cli(capsys, *argv)
        assert rc == 0, err
        if argv[1] == "--json":
            strict_json(out)
    assert "<script>" not in (tmp_path / "r.html").read_text()
    # numbers at the ends of a double: gaps beyond a double are no gap, plots that cannot hold them are left out
    for value, clock in ((5e-324, 2000.0), (1.7976931348623157e308, 1e308), (1e-300, 1e-300)):
        d = doc_of(good)
        d["host"]["cpu_max_mhz"] = clock
        for m in d["measurements"][:2]:
            m["value"] = value
            m["stats"].update(median=value, min=value, max=value, ci95=[value, value], mean=value, iqr=0, stdev=0)
        f = put(tmp_path, d, "extreme.json")
        for argv in reading_verbs(f, good, tmp_path):
            rc, out, err = cli(capsys, *argv)
            assert rc == 0, (argv, err)


def test_json_output_is_strict_even_when_numbers_in_memory_are_not():
    nan = float("nan")
    m = Measurement(workload="w", variant={"x": math.inf}, unit="u", value=1.0, metrics={"a": nan, "b": [math.inf]},
                    flops=nan, energy_j=math.inf)
    rs = ResultSet(host={}, device={"type": "cpu", "product": "p"}, measurements=[m])
    # a record refuses a NaN value; one built past validation still renders as strict JSON
    other = ResultSet(host={}, device={"type": "cpu", "product": "q"}, measurements=[
        Measurement.model_construct(workload="w", variant={"x": None}, unit="u", value=nan, status="ok")])
    doc = strict_json(render([rs, other], format="json"))
    assert doc["rows"][0]["cells"]["p"]["value"] == 1.0
    rs2 = ResultSet.read(strict_json(json.dumps(rs.model_dump(mode="json"), allow_nan=False)))
    assert rs2.measurements[0].metrics == {"a": None, "b": [None]} and rs2.measurements[0].flops is None


# ---- files that are not files, or too much of one ----------------------------------------------------------

@pytest.mark.slow
def test_a_fifo_dev_zero_a_folder_and_an_oversized_file_are_refused_at_once(tmp_path, good):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: refused by its size before a byte is read
    for path, words in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                        (tmp_path, "is a folder"), (big, "larger than 64 MiB")):
        t0 = time.monotonic()
        for verb in (["compare", path, good], ["history", "--import", path, "--db", tmp_path / "h.sqlite"],
                     ["run", "--resume", path]):
            r = gapbench(*verb, timeout=60)
            assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert time.monotonic() - t0 < 60


@pytest.mark.slow
def test_fifty_thousand_measurements_compare_in_seconds_and_a_huge_reason_is_cut(tmp_path, good):
    d = doc_of(good)
    base = d["measurements"]
    d["measurements"] = [dict(base[i % 3], variant={"i": i}) for i in range(50_000)]
    d["measurements"][2]["reason"] = "why " * 2400  # 9,600 characters: within the schema, too long for a cell
    f = put(tmp_path, d, "50k.json")
    t0 = time.monotonic()
    r = gapbench("compare", f, good, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "the terminal shows the first 2,000 of 50,00" in r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) < 600
    assert "why why" in r.stdout and "why " * 200 not in r.stdout
    r = gapbench("compare", "--json", f, good, timeout=120)
    assert r.returncode == 0 and len(strict_json(r.stdout)["rows"]) == 50_003
    assert time.monotonic() - t0 < 90
    too_many = dict(d, measurements=[{"workload": "w", "variant": {}, "unit": "u", "status": "ok", "value": 1}] * 100_001)
    r = gapbench("compare", put(tmp_path, too_many, "too-many.json"), timeout=60)
    one_line_error(r.returncode, r.stderr, "measurements: 100001 entries; gapbench reads at most 100000")


# ---- numbers on the command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["run", "--budget", "nan"], "argument --budget"),
    (["run", "--budget", "inf"], "argument --budget"),
    (["run", "--timeout", "inf"], "argument --timeout"),
    (["run", "--min-time", "nan"], "argument --min-time"),
    (["run", "--variant-budget", "0"], "argument --variant-budget"),
    (["run", "--memory-limit", "1e400"], "argument --memory-limit"),
    (["run", "--repeats", "0"], "argument --repeats"),
    (["run", "--repeats", "-3"], "argument --repeats"),
    (["run", "--threads", "0"], "argument --threads"),
    (["run", "--threads", "-1"], "argument --threads"),
    (["run", "--steps", "many"], "argument --steps"),
    (["run", "--batch-size", "0"], "--batch-size"),
    (["run", "--label", "x" * 300], "argument --label"),
    (["frameworks", "--timeout", "nan"], "argument --timeout"),
    (["history", "--limit", "0"], "argument --limit"),
    (["history", "--limit", "-1"], "argument --limit"),
    (["coverage", "--budget", "0"], "--budget '0': must be more than 0"),
    (["coverage", "--op-timeout", "nan"], "--op-timeout 'nan'"),
    (["coverage", "--max-samples", "0"], "argument --max-samples"),
    (["coverage", "--show", "lots"], "--show 'lots'"),
])
def test_a_number_out_of_range_is_a_usage_error(capsys, argv, words):
    rc, out, err = cli(capsys, *argv)
    one_line_error(rc, err, words)


# ---- journals ----------------------------------------------------------------------------------------------

def _journal(tmp_path, lines):
    out = tmp_path / "run.json"
    (tmp_path / "run.json.journal.jsonl").write_text("".join(x if isinstance(x, str) else json.dumps(x) + "\n"
                                                             for x in lines))
    return out


HEADER = {"event": "header", "run_id": "0123456789abcdef", "started_at": "2026-01-01T00:00:00+00:00",
          "plan": {"device": "cpu", "entries": [["gemm", "tiny"]]}, "host": {}}


@pytest.mark.parametrize("lines, words", [
    ([{"event": "measurement", "measurement": {}}], "has no run plan"),
    ([dict(HEADER, plan={"device": "cpu", "entries": "gemm"})], "plan.entries"),
    ([dict(HEADER, plan={"device": "cpu", "entries": [["gemm", "tiny"]], "repeats": -1})], "plan.repeats"),
    ([dict(HEADER, plan={"device": "cpu", "entries": [["gemm", "tiny"]], "budget_s": 1e999})], "plan"),
    ([dict(HEADER, run_id=7)], "run_id"),
    ([dict(HEADER, host={"cpu_max_mhz": "fast"})], "host.cpu_max_mhz"),
    (["not json at all\n", "{]\n"], "has no run plan"),
])
def test_a_journal_that_cannot_be_resumed_is_one_line(tmp_path, capsys, lines, words):
    out = _journal(tmp_path, lines)
    rc, _, err = cli(capsys, "run", "--resume", out)
    one_line_error(rc, err, "cannot resume", words)


def test_a_damaged_journal_line_is_skipped_and_its_variant_measured_again(tmp_path):
    from gapbench.run import read_journal

    m = gemm(1.0).model_dump(mode="json")
    out = _journal(tmp_path, [HEADER, "garbage {\n", {"event": "measurement", "measurement": m},
                              '{"event": "measurement", "measurement": {"value": NaN}}\n',
                              {"event": "measurement", "measurement": dict(m, value=-1)}, '{"event": "meas'])
    header, _, done = read_journal(str(out))
    assert header["run_id"] == HEADER["run_id"] and len(done) == 1


def test_a_coverage_journal_or_file_that_is_no_such_thing_is_one_line(tmp_path, capsys):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"row": 1}\n[1, 2]\n')
    for resume, words in ((fifo, "not a regular file"), (plain, "not a coverage journal")):
        rc, _, err = cli(capsys, "coverage", "--device", "cpu", "--resume", resume, "-o", tmp_path / "c.json")
        one_line_error(rc, err, str(resume), words)


def test_a_gemm_row_whose_shape_is_not_numbers_gives_no_rate_and_compare_still_answers(tmp_path, capsys):
    import json as _json

    from gapbench.cli import main

    doc = _json.loads((REPO / "results" / "cpu-epyc-2core-quick-1thread.json").read_text())
    gemm_rows = [m for m in doc["measurements"] if m["workload"] == "gemm" and "m" in m["variant"]]
    gemm_rows[0]["variant"]["m"] = None
    bad = tmp_path / "odd-shape.json"
    bad.write_text(_json.dumps(doc))
    rc = main(["compare", str(bad), str(REPO / "results" / "cpu-epyc-2core-quick-2threads.json")])
    assert rc == 0, capsys.readouterr().err
