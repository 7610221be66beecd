import json
import os

import pytest

from conftest import REPO
from gapbench.errors import ResultFileError
from gapbench.results import SCHEMA_VERSION, Measurement, ResultSet, is_results_file, load, save
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
