"""Fuzzing the loader and the four verbs that read results files (compare, compare --json, report,
history --import) with Hypothesis: any value of any JSON type in any field, cut files, NaN and lone
surrogates. Every answer is exit 0 or one line and exit 2; what is accepted is valid under the shipped JSON
Schema as the jsonschema library reads it (an implementation independent of gapbench's); JSON out is strict.
benchmarks/fuzz_inputs.py runs the same questions over 10,000 files."""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compare_fixtures import gemm, membw, result_set
from conftest import REPO
from gapbench.cli import main as cli_main
from gapbench.errors import ResultFileError
from gapbench.results import load

BASE = result_set([gemm(1.0), membw(10.0), gemm(None, dtype="tf32", status="unsupported", reason="no TF32")],
                  label="fuzz").model_dump(mode="json")
BASE["frameworks"] = [{"framework": "torch", "version": "2.13", "status": "works", "device": "cpu", "reason": ""}]
BASE["coverage"] = {"summary": {"total": 3, "native": 2, "skipped": 0, "native_pct": 66.7},
                    "ops": [{"op": "abs", "variant": "", "dtype": "float32", "status": "native", "family": "unary"}]}


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(BASE) if p]
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([10**400, -(10**400), 2**63, 0, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=30),  # lone surrogates too
    st.sampled_from(["", "7", "[red]x[/]", "<script>alert(1)</script>", "x" * 12_000]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


def _mutated(path, value, cut) -> bytes:
    doc = json.loads(json.dumps(BASE))
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    text = json.dumps(doc, allow_nan=True)  # NaN and Infinity as their (non-JSON) tokens
    if cut is not None:
        text = text[: int(len(text) * cut)]
    return text.encode("utf-8", "surrogatepass")


def _strict(data: bytes):
    """The document as a strict reader sees it, or None when it is not strict JSON."""
    def refuse(c):
        raise ValueError(c)

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=refuse)
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        return None
    return doc


def _finite(doc) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(_finite(v) for v in doc.values())
    if isinstance(doc, list):
        return all(_finite(v) for v in doc)
    return True


class _Validator:
    """The shipped JSON Schema under the jsonschema library (a short repr for Hypothesis's reports)."""

    def __init__(self):
        import jsonschema

        self.v = jsonschema.Draft202012Validator(json.loads((REPO / "src/gapbench/results.schema.json").read_text()))

    def iter_errors(self, doc):
        return self.v.iter_errors(doc)

    def __repr__(self):
        return "validator"


@pytest.fixture(scope="module")
def validator():
    return _Validator()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    good = d / "good.json"
    good.write_text(json.dumps(BASE))
    return d, str(good)


def _cli(capsys, argv):
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=VALUES, cut=st.one_of(st.none(), st.floats(0.0, 0.999)))
def test_hostile_files_through_the_loader_and_the_reading_verbs(capsys, validator, work, path, value, cut):
    folder, good = work
    data = _mutated(path, value, cut)
    f = folder / "m.json"
    f.write_bytes(data)
    try:
        load(f)
        accepted = True
    except ResultFileError as e:
        accepted = False
        assert str(f) in str(e) and "\n" not in str(e)
    if accepted:  # what gapbench accepts, an independent reader accepts too
        doc = _strict(data)
        assert doc is not None and _finite(doc), "accepted a file that is not strict JSON"
        assert not list(validator.iter_errors(doc)), "accepted a file the shipped JSON Schema refuses"
    for argv in (["compare", f, good], ["compare", "--json", good, f],
                 ["report", f, good, "-o", folder / "r.html", "--force"],
                 ["history", "--import", f, "--db", folder / "h.sqlite"]):
        rc, out, err = _cli(capsys, argv)
        assert rc == (0 if accepted else 2), (argv, err)
        assert "Traceback" not in err and "internal error" not in err
        if rc == 2:
            assert len(err.strip().splitlines()) == 1, err
        if argv[1] == "--json" and rc == 0:
            assert _strict(out.encode()) is not None, "compare --json printed something that is not JSON"
