import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from gapbench.errors import ResultFileError
from gapbench.results import SCHEMA_VERSION, Measurement, ResultSet, SchemaError, is_results_file, load, save
from gapbench.stats import Stats


def _rs():
    ok = Measurement(workload="gemm", preset="tiny", variant={"dtype": "fp32", "m": 8, "n": 8, "k": 8},
                     unit="TFLOP/s", value=1.5, stats=Stats.from_samples([1.4, 1.5, 1.6]), flops=1024.0, bytes=768.0,
                     metrics={"nan": float("nan")})
    bad = Measurement(workload="gemm", preset="tiny", variant={"dtype": "tf32", "m": 8, "n": 8, "k": 8},
                      unit="TFLOP/s", status="unsupported", reason="no TF32 on this CPU")
    return ResultSet(host={"cpu": "x"}, device={"type": "cpu", "product": "CPU"}, measurements=[ok, bad], suite="quick")


def test_round_trip_keeps_every_field(tmp_path):
    rs = _rs()
    p = tmp_path / "r.json"
    save(rs, p)
    back = load(p)
    assert back.model_dump(mode="json") == json.loads(p.read_text())
    assert back.measurements[0].stats == rs.measurements[0].stats
    assert back.measurements[0].metrics == {"nan": None}  # JSON has no NaN
    assert back.measurements[1].status == "unsupported" and back.measurements[1].value is None
    assert back.run_id == rs.run_id and back.schema_version == SCHEMA_VERSION


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    p = tmp_path / "r.json"
    save(_rs(), p)
    save(_rs(), p)
    assert os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("schema_version"), "schema_version"),
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d.pop("measurements"), "measurements"),
    (lambda d: d.update(device="gpu"), "device"),
    (lambda d: d["measurements"][0].pop("unit"), "measurements[0].unit"),
    (lambda d: d["measurements"][1].update(status="fast"), "measurements[1].status"),
    (lambda d: d["measurements"][0].update(value="12"), "measurements[0].value"),
    (lambda d: d["measurements"][0].update(value=None), "measurements[0].value"),
    (lambda d: d["measurements"][0].update(stats={"median": 1}), "measurements[0].stats"),
])
def test_malformed_files_are_rejected_naming_file_and_field(tmp_path, mutate, field):
    d = _rs().model_dump(mode="json")
    mutate(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ResultFileError) as e:
        load(p)
    assert str(p) in str(e.value) and field in str(e.value)
    assert "\n" not in str(e.value)


def test_not_json_and_missing_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ResultFileError, match="not valid JSON"):
        load(p)
    with pytest.raises(ResultFileError, match="no such file"):
        load(tmp_path / "missing.json")


def test_measurement_invariants():
    with pytest.raises(ValueError):
        Measurement(workload="w", variant={}, unit="u", status="ok", value=None)
    with pytest.raises(ValueError):
        Measurement(workload="w", variant={}, unit="u", status="error", reason="")


def test_every_results_file_shipped_in_results_loads_and_writes_back_the_same(tmp_path):
    """Results files written by earlier versions load with today's records, and written again they read the same."""
    files = [p for p in sorted((REPO / "results").rglob("*.json")) if is_results_file(p)]
    assert len(files) >= 25
    for p in files:
        rs = load(p)
        out = tmp_path / p.name
        save(rs, out)
        again = load(out)
        assert again.model_dump(mode="json") == rs.model_dump(mode="json"), p
        assert [m.key for m in again.measurements] == [m.key for m in rs.measurements]


# ---- the edges a file cannot cross: figures below 0 where they are rates or times, null where a string or an
# object belongs, a blank unit -----------------------------------------------------------------------------

def _stats(**change):
    def mutate(d):
        d["measurements"][0]["stats"].update(change)
    return mutate


EDGES = {
    "a negative median": (_stats(median=-1.5), "measurements[0].stats.median"),
    "a negative minimum": (_stats(min=-1.0), "measurements[0].stats.min"),
    "a negative mean": (_stats(mean=-0.1), "measurements[0].stats.mean"),
    "an interval below 0": (_stats(ci95=[-0.5, 1.6]), "measurements[0].stats.ci95[0]"),
    "an interval wholly below 0": (_stats(ci95=[-2.0, -1.0]), "measurements[0].stats.ci95[0]"),
    "a negative value on a row that is not ok": (lambda d: d["measurements"][1].update(value=-3.0),
                                                 "measurements[1].value"),
    "a zero value on a row that is not ok": (lambda d: d["measurements"][1].update(value=0.0), "measurements[1].value"),
    "a unit of only spaces": (lambda d: d["measurements"][0].update(unit="   "), "measurements[0].unit"),
    "a workload of only white space": (lambda d: d["measurements"][0].update(workload=" \t "),
                                       "measurements[0].workload"),
    "a null reason": (lambda d: d["measurements"][1].update(reason=None), "measurements[1].reason"),
    "a null reason on an ok row": (lambda d: d["measurements"][0].update(reason=None), "measurements[0].reason"),
    "null metrics": (lambda d: d["measurements"][0].update(metrics=None), "measurements[0].metrics"),
    "null options": (lambda d: d.update(options=None), "options"),
    "a null gapbench version": (lambda d: d.update(gapbench_version=None), "gapbench_version"),
    "a null start time": (lambda d: d.update(started_at=None), "started_at"),
    "a null end time": (lambda d: d.update(finished_at=None), "finished_at"),
}


def _good_doc() -> dict:
    rs = _rs()
    rs.finished_at = rs.started_at
    return rs.model_dump(mode="json")


@pytest.mark.parametrize("edge", EDGES)
def test_a_file_across_an_edge_is_refused_naming_the_field(tmp_path, edge):
    mutate, field = EDGES[edge]
    d = _good_doc()
    mutate(d)
    with pytest.raises(SchemaError) as e:
        ResultSet.read(d)
    assert e.value.field == field, str(e.value)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ResultFileError) as e:
        load(p)
    assert f"{p}: {field}:" in str(e.value) and "\n" not in str(e.value)


def test_the_json_schema_refuses_the_same_edges():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads((REPO / "src/gapbench/results.schema.json").read_text()))
    assert not list(validator.iter_errors(_good_doc()))
    for edge, (mutate, _) in EDGES.items():
        d = _good_doc()
        mutate(d)
        assert list(validator.iter_errors(d)), edge


def test_records_built_in_code_hold_to_the_same_edges():
    with pytest.raises(ValueError, match="above 0, not -3"):
        Measurement(workload="w", variant={}, unit="u", status="error", reason="failed", value=-3.0)
    with pytest.raises(ValueError, match="blank"):
        Measurement(workload="w", variant={}, unit="  ", value=1.0)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Stats.from_samples([-2.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Stats(median=1.0, iqr=0.1, min=0.9, max=1.1, n=3, ci95=(-0.1, 1.1))
    # None in code is a value not known: the file is written without the field, and reads back
    m = Measurement(workload="w", variant={}, unit="u", reason=None, value=1.0, metrics=None)
    assert m.reason == "" and m.metrics == {}
    rs = ResultSet(host={}, device={}, measurements=[], gapbench_version=None, started_at=None, options=None)
    d = rs.model_dump(mode="json")
    assert "gapbench_version" not in d and "started_at" not in d and "finished_at" not in d and d["options"] == {}
    assert ResultSet.read(d).model_dump(mode="json") == d


def test_what_may_be_signed_or_null_still_loads(tmp_path):
    """A gap or a difference among a row's metrics, a negative variant parameter, a failed row without a value
    or stats, and the fields typed 'or null' as null."""
    d = _good_doc()
    d["measurements"][0]["metrics"] = {"gap_pct": -12.5, "delta_s": -0.25, "offset": None}
    d["measurements"][0]["variant"]["shift"] = -1
    d["measurements"][1].update(value=None, stats=None, preset=None)
    d.update(suite=None, label=None, coverage=None, frameworks=None)
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(d))
    rs = load(p)
    assert rs.measurements[0].metrics["gap_pct"] == -12.5 and rs.measurements[0].variant["shift"] == -1


def test_compare_refuses_each_edge_with_one_line_and_exit_2(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_good_doc()))
    runs = {}
    for i, (edge, (mutate, field)) in enumerate(EDGES.items()):
        d = _good_doc()
        mutate(d)
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(json.dumps(d))
        runs[edge] = (bad, field, subprocess.Popen([sys.executable, "-m", "gapbench", "compare", str(bad), str(good)],
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for edge, (bad, field, proc) in runs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (edge, err)
        assert err.count("\n") == 1 and f"{bad}: {field}:" in err and "Traceback" not in err, (edge, err)
        assert out == ""


def test_a_replaced_record_writes_only_its_fields_and_a_file_holding_pydantic_bookkeeping_reads_without_it():
    from gapbench.results import Measurement

    m = Measurement(workload="w", variant={}, unit="u", status="ok", value=1.0, later_field=3)
    d = m.replace(value=2.0).model_dump(mode="json")
    assert "__pydantic_extra__" not in d and d["value"] == 2.0 and d["later_field"] == 3
    d["__pydantic_extra__"] = {}
    assert "__pydantic_extra__" not in Measurement.read(d).model_dump(mode="json")


def test_an_integer_beyond_a_double_in_stats_is_a_schema_error_not_an_overflow():
    from gapbench.record import SchemaError
    from gapbench.results import Measurement

    doc = {"workload": "w", "variant": {}, "unit": "u", "status": "ok", "value": 1.0,
           "stats": {"median": 10**400, "iqr": 0, "min": 1, "max": 1, "n": 3, "ci95": [1, 1]}}
    with pytest.raises(SchemaError, match="stats.median"):
        Measurement.read(doc)
