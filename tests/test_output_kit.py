"""One output kit for every verb: the width piped, the CSV's interval, basis and flag columns, units as written,
readable `env` values, a failure's reason said once, no internal variables in results files; and the words of
`port` and `ops` about what is left unmapped or not audited."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from compare_fixtures import gemm, result_set, stats_around, write
from gapbench.compare import compare
from gapbench.coverage.trace import operator_status
from gapbench.report import render
from gapbench.report.runs import results_table
from gapbench.report.tables import failures
from gapbench.results import Measurement, load

ROOT = Path(__file__).resolve().parents[1]
FAILED_INFER = ROOT / "results" / "cpu-epyc-2core-llm-infer-tiny-2threads.json"
OLD_ENV = ROOT / "results" / "cpu-xeon-2core-numerics-fp32-2threads.json"


def _gapbench(*args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gapbench", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, **kw)


def _project(tmp_path: Path) -> Path:
    src = tmp_path / "proj" / "src"
    src.mkdir(parents=True)
    (src / "k.cu").write_text('#include <cuda_runtime.h>\n#include <cublas_v2.h>\n#include "my_cuda_utils.cuh"\n'
                              "#include <cuda/std/atomic>\n"
                              "__global__ void a_kernel_with_a_long_descriptive_name(float* x) "
                              "{ x[threadIdx.x] = 1; cudaDeviceSynchronize(); }\n")
    (src / "my_cuda_utils.cuh").write_text("#pragma once\n")
    return tmp_path / "proj"


def test_every_verb_prints_full_width_when_piped(tmp_path):
    proj = _project(tmp_path)
    for args in (["scan", str(proj)], ["port", str(proj), "-o", str(tmp_path / "out")]):
        p = _gapbench(*args)
        assert p.returncode in (0, 1), p.stderr
        widest = max(len(line) for line in p.stdout.splitlines())
        assert widest > 80, (args, p.stdout)  # rich's 80-column default would fold the table


def test_port_leaves_unmapped_only_real_cuda_headers(tmp_path):
    proj = _project(tmp_path)
    p = _gapbench("port", str(proj), "-o", str(tmp_path / "out"), "--format", "json")
    assert p.returncode == 0, p.stderr
    unmapped = [u["identifier"] for u in json.loads(p.stdout)["unmapped"]]
    assert "#include cuda/std/atomic" in unmapped
    assert not any("my_cuda_utils" in u or "hip/" in u or "hipblas" in u for u in unmapped), unmapped


def test_ops_never_names_an_entry_that_only_reaches_an_operator():
    index = {"entries": [{"op": "special.ndtr", "forward": ["aten.add.Scalar", "aten.erf.default"]},
                         {"op": "linalg.svd", "forward": ["aten.alias.default", "aten._linalg_svd.default"]},
                         {"op": "add", "forward": ["aten.add.Tensor"]}]}
    for op, odd in (("aten.add.Scalar", "special.ndtr"), ("aten.alias.default", "linalg.svd")):
        st = operator_status(op, None, {}, index, grad=False)
        assert st["status"] == "unknown" and st["entry"] is None and odd not in st["reason"], st
    st = operator_status("aten.add.Tensor", None, {}, index, grad=False)
    assert st["entry"] == "add" and st["reason"] == "add is not in this coverage file"


def test_csv_has_interval_basis_and_flag_columns_and_says_no_verdict():
    watch = {"flagged": True, "reasons": ["host busy: other processes took 1.3 of 2 CPUs"]}
    a = result_set([gemm(1.0)], label="a")
    b = result_set([gemm(2.0).model_copy(update={"host_watch": watch})], label="b")
    rows = list(csv.DictReader(io.StringIO(render([a, b], format="csv"))))
    for col in ("ci_level", "gap_low", "gap_high", "basis", "flagged", "significant"):
        assert col in rows[0]
    row = next(r for r in rows if r["platform"] == "b")
    assert row["significant"] == "no verdict" and "host busy" in row["flagged"] and row["gap_low"]
    assert row["basis"]


def test_docs_list_every_csv_column_in_order_and_no_verdict():
    from gapbench.report import csvfile, numerics

    doc = (ROOT / "docs" / "compare.md").read_text()
    section = doc[doc.index("## The CSV file"):doc.index("## History")]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    named = [c.strip("` ") for line in table for c in line.split("|")[1].split(",")]
    assert named == list(csvfile.CSV_FIELDS)
    assert all(f"`{c}`" in section for c in numerics.CSV_FIELDS)
    assert f"`{csvfile.NO_VERDICT}`" in section


def test_units_are_spelled_as_written():
    m = Measurement(workload="launch", preset="tiny", variant={"op": "empty"}, unit="us", value=5.0,
                    higher_is_better=False, stats=stats_around(5.0, 0.05))
    md = render([result_set([m], label="x"), result_set([m], label="y")], format="md")
    assert "| µs (lower is better) |" in md and "| us " not in md


def test_env_prints_readable_values():
    p = _gapbench("env", "--device", "cpu")
    assert p.returncode == 0, p.stderr
    assert "\\t" not in p.stdout and "['" not in p.stdout
    assert "at::get_num_threads() : " in p.stdout and "GiB (" in p.stdout


def test_a_failed_point_says_its_reason_once():
    rs = load(FAILED_INFER)
    bad = [m for m in rs.measurements if not m.ok]
    assert len(bad) > 10 and len({m.reason for m in bad}) == 1
    t = failures(compare([rs]))
    assert len(t.rows) == 1 and f"({len(bad)} rows: metric=" in t.rows[0][1]


def test_the_run_table_says_a_failed_batch_once_and_units_as_written():
    rs = load(FAILED_INFER)
    bad = [m for m in rs.measurements if not m.ok]
    t = results_table(rs)
    failed = [r for r in t.rows if r[5].startswith(bad[0].status)]
    assert len(failed) == 1 and f"({len(bad)} rows: metric=" in failed[0][1], failed
    assert len(t.rows) == len(rs.measurements) - len(bad) + 1
    quick = results_table(load(ROOT / "results" / "cpu-epyc-2core-collectives-gloo-2ranks.json"))
    units = {r[3] for r in quick.rows}
    assert "µs" in units and "us" not in units


def test_results_files_hold_no_internal_variables(tmp_path):
    old = json.loads(OLD_ENV.read_text())
    assert "GAPBENCH_CHILD_TOKEN" in old["device"]["env"]  # as the file was written
    rs = load(OLD_ENV)
    assert not any(k.startswith("GAPBENCH_") for k in rs.device["env"]) and rs.device["env"]["OMP_NUM_THREADS"]
    env = json.loads(Path(write(rs, tmp_path / "again.json")).read_text())["device"]["env"]
    assert not any(k.startswith("GAPBENCH_") for k in env)
    # what a run records, in a process that has gapbench's internal variables and a setting of the user's
    code = "import json; from gapbench.devices import host; print(json.dumps(host.relevant_env()))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                       env={**os.environ, "GAPBENCH_CHILD_TOKEN": "x", "GAPBENCH_EVENTS": "3",
                            "GAPBENCH_PARENT_PID": "1", "GAPBENCH_JOB_FILE": "/tmp/j", "GAPBENCH_SPECS": "/tmp/s.toml"})
    recorded = json.loads(p.stdout)
    assert recorded.get("GAPBENCH_SPECS") == "/tmp/s.toml"
    assert not {"GAPBENCH_CHILD_TOKEN", "GAPBENCH_EVENTS", "GAPBENCH_PARENT_PID", "GAPBENCH_JOB_FILE"} & set(recorded)
