"""The command line: bad input gives one line and exit code 2; the verbs answer in machine-readable form."""

import json

import pytest

from conftest import FIXTURES, gapbench


@pytest.mark.parametrize("args, words", [
    (["run", "--workload", "nosuch"], "unknown workload 'nosuch'"),
    (["run", "--workload", "gemm:huge"], "unknown preset 'huge'"),
    (["run", "--suite", "nosuch"], "unknown suite 'nosuch'"),
    (["run", "--device", "tpu"], "unknown device 'tpu'"),
    (["run", "--device", "cuda"], "not available"),
    (["run", "--resume", "/nonexistent/x.json"], "cannot resume"),
    (["run", "--workload-file", "/nonexistent/w.py"], "no such file"),
    (["run", "--workload-file", str(FIXTURES / "broken_import.py")], "failed to import"),
    (["run", "--budget", "-3"], "argument --budget: expected a number of seconds above 0"),
    (["run", "--batch-size", "lots"], "--batch-size"),
    (["run", "--workload", "elementwise:tiny", "--dtype", "bf16,int3"], "unknown dtype 'int3' in --dtype"),
    (["run", "--no-such-flag"], "unrecognized arguments"),
    (["nosuchverb"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    r = gapbench(*args, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert words in lines[0]
    assert "Traceback" not in r.stderr


def test_malformed_resume_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "host": {}}')
    r = gapbench("run", "--resume", bad)
    assert r.returncode == 2 and str(bad) in r.stderr and "device" in r.stderr


def test_help_works_as_module_and_for_every_verb():
    r = gapbench("--help")
    assert r.returncode == 0 and "run" in r.stdout and "list" in r.stdout
    for verb in ("run", "list", "env"):
        assert gapbench(verb, "--help").returncode == 0


def test_list_json_names_workloads_presets_and_suites():
    r = gapbench("list", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    by = {w["name"]: w for w in data["workloads"]}
    assert {"tiny", "quick", "standard", "fp8"} <= set(by["gemm"]["presets"])
    assert by["membw"]["unit"] == "GB/s"
    assert {"quick", "standard", "article"} <= {s["name"] for s in data["suites"]}


def test_env_json_reports_cpu_identity():
    r = gapbench("env", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["device"]["type"] == "cpu" and d["device"]["torch"]
    assert "cpu" in d["available"]
    assert isinstance(d["device"]["isa"], list)


@pytest.mark.slow
def test_user_workload_file_runs_with_the_same_contract(tmp_path):
    wf = tmp_path / "my_bench.py"
    wf.write_text(
        "import torch\n"
        "from gapbench.timing import time_fn\n"
        "from gapbench.workloads import Variant, Workload\n"
        "class Axpy(Workload):\n"
        "    name = 'axpy'; unit = 'GB/s'; presets = {'tiny': 'small'}\n"
        "    def variants(self, preset, ctx):\n"
        "        return [Variant({'n': 4096}, bytes=3 * 4096 * 4)]\n"
        "    def run(self, v, ctx):\n"
        "        x = torch.ones(4096); y = torch.ones(4096)\n"
        "        t = time_fn(lambda: y.add_(x, alpha=0.5), ctx.device, budget_s=ctx.budget_s, min_time_s=0.01)\n"
        "        return self.throughput(v, ctx, t, v.bytes, 1e-9)\n")
    out = tmp_path / "o.json"
    r = gapbench("run", "--device", "cpu", "--workload-file", wf, "--output", out, "--no-history", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    (m,) = d["measurements"]
    assert m["workload"] == "axpy" and m["status"] == "ok" and m["value"] > 0
    assert m["stats"]["n"] >= 3 and len(m["stats"]["ci95"]) == 2


def test_an_error_that_carries_a_users_multi_line_text_is_still_one_line_with_its_escapes_shown(tmp_path):
    wf = tmp_path / "loud.py"
    wf.write_text('raise RuntimeError("raised on purpose\\nover two lines\\x1b[2J")\n')
    r = gapbench("run", "--workload-file", wf, "--no-history", "-o", tmp_path / "o.json", timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "raised on purpose over two lines" in lines[0], r.stderr
    assert "\x1b" not in r.stderr and "\\x1b[2J" in lines[0]
