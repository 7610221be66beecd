"""The scan prefilter (gapbench.scan.prefilter): files it skips could hold no finding, so every scan reports the
same with it and without it; its trigger words come from the rules, so every rule is covered."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gapbench.scan import load_rules, scan
from gapbench.scan import prefilter as pf
from gapbench.scan.engine import Matcher, kinds_of
from gapbench.scan.match_text import CPP_CUDA_HINT
from gapbench.scan.walker import walk

FIXTURES = Path(__file__).parent / "fixtures"


def _everything(report) -> tuple:
    return (report.findings, report.notes, report.skipped, report.files_seen, report.files_scanned,
            report.bytes_scanned, report.suppressed)


def _both(monkeypatch, root, jobs) -> tuple[tuple, tuple]:
    monkeypatch.setenv(pf.OFF_ENV, "0")
    off = _everything(scan(root, jobs=jobs))
    monkeypatch.setenv(pf.OFF_ENV, "1")
    return off, _everything(scan(root, jobs=jobs))


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("root", ["scan_kinds", "scan", "."])
def test_fixtures_scan_the_same_with_and_without_the_prefilter(monkeypatch, root, jobs):
    off, on = _both(monkeypatch, FIXTURES / root, jobs)
    assert off[0], "the fixtures hold findings"
    assert on == off


def test_the_prefilter_skips_files_without_triggers_and_keeps_their_notes(monkeypatch, tmp_path):
    (tmp_path / "plain.py").write_text("x = 1\n")
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nx = 1\n")               # not UTF-8: the note stays
    (tmp_path / "kelvin.py").write_text("import torch\ntorch.\u212a = 1\n")   # a look-alike: always read
    (tmp_path / "header.h").write_text("int f(void);\n")
    (tmp_path / "kernel.h").write_text("#include <cuda_runtime.h>\n__global__ void k() {}\n")
    (tmp_path / "uses.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "ci.yml").write_text('on: push\njobs:\n  b:\n    env:\n      "\\x43UDA_HOME": /opt\n'
                                     '    steps:\n      - run: make\n')
    (tmp_path / "Dockerfile").write_text("FROM python:3.11\nRUN pip install numpy\n")
    off, on = _both(monkeypatch, tmp_path, 1)
    assert on == off
    assert any("not UTF-8" in n.note for n in on[1])
    assert {f.path for f in on[0]} >= {"kernel.h", "uses.py"}
    m = Matcher(load_rules(), 2**20)
    skipped = {p.name for p in tmp_path.iterdir()
               if not m.prefilter.may_match(p.read_bytes(), kinds_of(p.name), p.name)}
    assert skipped == {"plain.py", "latin1.py", "header.h", "Dockerfile"}


def test_files_the_prefilter_skips_are_files_the_readers_would_not_read():
    """Python: the reader's own gate says no; C/C++: the header test says no."""
    m = Matcher(load_rules(), 2**20)
    entries, _, _ = walk(str(FIXTURES))
    seen = 0
    for e in entries:
        kinds = kinds_of(e.rel)
        data = Path(e.path).read_bytes()
        if not kinds or m.prefilter.may_match(data, kinds, e.rel):
            continue
        seen += 1
        text = data.decode("utf-8", errors="replace")
        if "python" in kinds:
            assert m.python.gate(text) is None, e.rel
        if "cpp?" in kinds:
            assert not CPP_CUDA_HINT.search(text), e.rel
    assert seen


def test_every_text_rule_gives_trigger_words():
    """A deps or build rule whose pattern gives no literal would make every file of its kind be read: a rule
    added so must say why (or be written with its literal word)."""
    rules = load_rules()
    for r in rules.rules.values():
        if r.regex is not None and {"deps", "build"} & set(r.kinds):
            assert pf.literals_of(r.pattern, r.regex.flags), f"rule {r.id}: no literal in {r.pattern!r}"
    p = Matcher(rules, 2**20).prefilter
    assert p.kinds["python"] and p.kinds["cpp?"] and p.kinds["deps"] and p.kinds["build"]


def _contains_one(alternatives, text: str) -> bool:
    low = text.lower()
    return any(all(any(x in low for x in s) for s in sets) for sets in alternatives)


def test_every_match_of_every_rule_holds_its_trigger_words():
    """Soundness of the literals read off the patterns, on every match of every packaged rule in the fixtures
    (and of the header test)."""
    rules = load_rules()
    pats = [(r.id, r.regex) for r in rules.rules.values() if r.regex is not None] + [("cpp-hint", CPP_CUDA_HINT)]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in FIXTURES.rglob("*") if p.is_file()]
    checked = 0
    for rid, rx in pats:
        lits = pf.literals_of(rx.pattern, rx.flags)
        if lits is None:
            continue
        for t in texts:
            for m in rx.finditer(t):
                if m.group(0):
                    assert _contains_one(lits, m.group(0)), (rid, m.group(0))
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("pattern, matches, literals", [
    (r"colou?r", ["color", "COLOUR"], [[{"color", "colour"}]]),
    (r"b(?:.a)", ["bxa"], [[{"b"}, {"a"}]]),
    (r"(?:a|b.)c", ["ac", "bzc"], [[{"a"}, {"c"}], [{"b"}, {"c"}]]),
    (r"-gencode\s+arch", ["-gencode\n arch"], [[{"-gencode"}, {"arch"}]]),
    (r"[Cc]uda(Toolkit)?", ["CudaToolkit", "cuda"], [[{"cuda", "cudatoolkit"}]]),
    (r"x{0,3}", [""], None),
    (r"\d+", ["12"], None),
    (r"a|.", ["z"], None),
])
def test_literals_of_patterns(pattern, matches, literals):
    got = pf.literals_of(pattern)
    assert (None if got is None else [[set(s) for s in sets] for sets in got]) == literals
    for m in matches:
        assert re.fullmatch(pattern, m, re.IGNORECASE | re.DOTALL)
        assert got is None or _contains_one(got, m)


def test_ascii_lookalikes_are_every_character_read_as_an_ascii_letter():
    """str.lower() and case-insensitive matching take these (and only these) non-ASCII characters for ASCII
    letters; the prefilter's byte search does not, so a file holding one is always read."""
    letter = re.compile(r"[a-z]", re.IGNORECASE)
    found = set()
    for cp in range(0x80, sys.maxunicode + 1):
        c = chr(cp)
        if letter.fullmatch(c) or any(x.isascii() for x in c.lower()):
            found.add(c)
    assert found == set(pf.ASCII_LOOKALIKES)


def test_the_gate_literals_found_in_the_bytes_are_those_the_python_reader_finds_in_the_text():
    m = Matcher(load_rules(), 2**20)
    quick = sorted(m.python._quick)
    samples = [p.read_bytes() for p in FIXTURES.rglob("*.py")]
    samples += [" ".join(quick).upper().encode(), "".join(quick).encode(), b"caf\xe9 " + quick[0].encode(), b"x = 1"]
    for data in samples:
        text = data.decode("utf-8", errors="replace")
        want = frozenset(q for q in m.python._quick if q in text.lower())
        got = m.prefilter.quick_present(data)
        assert got is None or got == want
        assert m.python.gate(text, got) == m.python.gate(text)
    assert m.prefilter.quick_present("torch.\u212a".encode()) is None
