"""Every flag of `gapbench run` with a value a user could type by mistake: one line on stderr naming the flag,
exit code 2, and no run started (no results file, no journal). The command line is run in process (a refused
value never reaches a worker, so each case takes milliseconds; a case that started a run would write files)."""

from __future__ import annotations

import argparse

import pytest

from conftest import FIXTURES, gapbench
from gapbench import history
from gapbench.cli import build_parser
from gapbench.cli import main as cli_main

LLM = ["-w", "llm-infer:tiny"]
SERVER = [*LLM, "--server", "http://127.0.0.1:9"]
GEMM = ["-w", "gemm:tiny"]
TRAIN = ["-w", "llm-train:tiny"]

# (id, arguments after `gapbench run --device cpu`, words the one line must hold)
CASES = [
    ("device-unknown", ["--device", "bogus", *GEMM], "--device"),
    ("device-index", ["--device", "cpu:5", *GEMM], "--device"),
    ("device-empty", ["--device", "", *GEMM], "--device"),
    ("suite-unknown", ["--suite", "bogus"], "--suite"),
    ("suite-empty", ["--suite", ""], "--suite"),
    ("workload-unknown", ["-w", "bogus"], "--workload"),
    ("workload-preset", ["-w", "gemm:bogus"], "--workload"),
    ("workload-no-name", ["-w", ":tiny"], "--workload"),
    ("workload-empty", ["-w", ""], "--workload"),
    ("workload-empty-preset", ["-w", "gemm:"], "--workload"),
    ("workload-file-missing", ["--workload-file", "missing.py"], "--workload-file"),
    ("workload-file-folder", ["--workload-file", "."], "--workload-file"),
    ("workload-file-not-python", ["--workload-file", "garbage.json"], "--workload-file"),
    ("workload-file-no-workload", ["--workload-file", "empty.py"], "--workload-file"),
    ("workload-file-bad-option", ["--workload-file", str(FIXTURES / "faulty_workloads.py"), "--attention",
                                  "bogus"], "--attention"),
    ("resume-empty", ["--resume", ""], "--resume"),
    ("output-folder", ["-o", ".", *GEMM], "--output"),
    ("output-empty", ["-o", "", *GEMM], "--output"),
    ("output-results", ["-o", "existing.json", *GEMM], "--output"),
    ("resume-missing", ["--resume", "missing.json"], "--resume"),
    ("resume-not-results", ["--resume", "garbage.json"], "--resume"),
    ("resume-with-workload", ["--resume", "existing.json", *GEMM], "--resume"),
    ("resume-with-option", ["--resume", "existing.json", "--dtype", "fp32"], "--resume"),
    ("force-without-output", ["--force", *GEMM], "--force"),
    ("budget-zero", ["--budget", "0", *GEMM], "--budget"),
    ("budget-negative", ["--budget", "-5", *GEMM], "--budget"),
    ("budget-huge", ["--budget", "1e12", *GEMM], "--budget"),
    ("variant-budget-nan", ["--variant-budget", "nan", *GEMM], "--variant-budget"),
    ("variant-budget-inf", ["--variant-budget", "inf", *GEMM], "--variant-budget"),
    ("timeout-zero", ["--timeout", "0", *GEMM], "--timeout"),
    ("timeout-text", ["--timeout", "abc", *GEMM], "--timeout"),
    ("min-time-nan", ["--min-time", "nan", *GEMM], "--min-time"),
    ("repeats-zero", ["--repeats", "0", *GEMM], "--repeats"),
    ("repeats-text", ["--repeats", "abc", *GEMM], "--repeats"),
    ("runs-zero", ["--runs", "0", *GEMM], "--runs"),
    ("runs-huge", ["--runs", "1000000000000", *GEMM], "--runs"),
    ("threads-zero", ["--threads", "0", *GEMM], "--threads"),
    ("threads-negative", ["--threads", "-2", *GEMM], "--threads"),
    ("memory-limit-zero", ["--memory-limit", "0", *GEMM], "--memory-limit"),
    ("memory-limit-nan", ["--memory-limit", "nan", *GEMM], "--memory-limit"),
    ("nproc-zero", ["--nproc", "0", *GEMM], "--nproc"),
    ("nproc-negative", ["--nproc", "-1", *GEMM], "--nproc"),
    ("nproc-text", ["--nproc", "abc", *GEMM], "--nproc"),
    ("nproc-more-than-cores", ["--nproc", "1000000", *GEMM], "--nproc"),
    ("nproc-huge", ["--nproc", "99999999999999999999", *GEMM], "--nproc"),
    ("nproc-beyond-oversubscribe", ["--nproc", "100000", "--oversubscribe", *GEMM], "--nproc"),
    ("oversubscribe-without-nproc", ["--oversubscribe", *GEMM], "--oversubscribe"),
    ("force-with-resume-of-nothing", ["--force", "--resume", "missing.json"], "--resume"),
    ("backend-unknown", ["--backend", "bogus", "--nproc", "2", *GEMM], "--backend"),
    ("backend-not-for-the-device", ["--backend", "nccl", "--nproc", "2", *GEMM], "--backend"),
    ("backend-without-nproc", ["--backend", "gloo", *GEMM], "--backend"),
    ("label-empty", ["--label", "", *GEMM], "--label"),
    ("label-blank", ["--label", "   ", *GEMM], "--label"),
    ("label-too-long", ["--label", "x" * 201, *GEMM], "--label"),
    ("json-with-a-value", ["--json=yes", *GEMM], "--json"),
    ("quiet-with-a-value", ["--quiet=yes", *GEMM], "--quiet"),
    ("no-history-with-a-value", ["--no-history=yes", *GEMM], "--no-history"),
    ("db-with-no-history", ["--db", "mine.sqlite", *GEMM], "--db"),  # every case here adds --no-history
    ("db-folder", ["--db", ".", *GEMM], "--db"),
    ("db-empty", ["--db", "", *GEMM], "--db"),
    ("db-not-a-history", ["--db", "garbage.json", *GEMM], "--db"),
    ("db-is-the-output", ["--db", "out.json", "-o", "out.json", *GEMM], "--db"),
    # workload options: declared by the workloads, checked in the plan against every workload that takes them
    ("dtype-unknown", ["--dtype", "fp7", *GEMM], "--dtype"),
    ("dtype-empty", ["--dtype", "", *GEMM], "--dtype"),
    ("dtype-empty-item", ["--dtype", "fp32,,bf16", *GEMM], "--dtype"),
    ("dtype-nobody-takes-it", ["--dtype", "fp32", "-w", "launch:quick"], "--dtype"),
    ("compile-nobody-takes-it", ["--compile", *GEMM], "--compile"),
    ("attention-unknown", ["--attention", "bogus", *TRAIN], "--attention"),
    ("attention-nobody-takes-it", ["--attention", "flash", *GEMM], "--attention"),
    ("decode-unknown", ["--decode", "replay", *LLM], "--decode"),
    ("decode-nobody-takes-it", ["--decode", "graph", *GEMM], "--decode"),
    ("decode-with-a-server", ["--decode", "graph", "-w", "llm-infer:tiny", "--server", "http://127.0.0.1:9"],
     "--decode"),
    ("batch-size-zero", ["--batch-size", "0", *TRAIN], "--batch-size"),
    ("batch-size-negative", ["--batch-size", "-1", *TRAIN], "--batch-size"),
    ("batch-size-text", ["--batch-size", "abc", *TRAIN], "--batch-size"),
    ("batch-size-empty-item", ["--batch-size", "1,,2", *LLM], "--batch-size"),
    ("batch-size-list-for-training", ["--batch-size", "1,2", *TRAIN], "--batch-size"),
    ("batch-size-nobody-takes-it", ["--batch-size", "4", *GEMM], "--batch-size"),
    ("steps-zero", ["--steps", "0", "-w", "diffusion-infer:tiny"], "--steps"),
    ("steps-text", ["--steps", "abc", "-w", "diffusion-infer:tiny"], "--steps"),
    ("steps-huge", ["--steps", "10000000", "-w", "diffusion-infer:tiny"], "--steps"),
    ("steps-nobody-takes-it", ["--steps", "5", *GEMM], "--steps"),
    ("flush-cache-nobody-takes-it", ["--flush-cache", "-w", "membw:tiny"], "--flush-cache"),
    ("gemm-shapes-two-dims", ["--gemm-shapes", "48x40", "-w", "gemm:listed"], "--gemm-shapes"),
    ("gemm-shapes-zero", ["--gemm-shapes", "0x40x40", "-w", "gemm:listed"], "--gemm-shapes"),
    ("gemm-shapes-nobody-takes-it", ["--gemm-shapes", "8x8x8", "-w", "membw:tiny"], "--gemm-shapes"),
    ("conv-shapes-three-dims", ["--conv-shapes", "2x8x8", "-w", "conv:listed"], "--conv-shapes"),
    ("conv-shapes-groups-not-dividing", ["--conv-shapes", "2x8x6x8x3x4", "-w", "conv:listed"], "--conv-shapes"),
    ("conv-shapes-nobody-takes-it", ["--conv-shapes", "2x8x8x8", "-w", "gemm:tiny"], "--conv-shapes"),
    ("compile-backend-empty", ["--compile-backend", "", "-w", "dynamic-shapes:tiny"], "--compile-backend"),
    ("compile-backend-nobody-takes-it", ["--compile-backend", "aot_eager", *GEMM], "--compile-backend"),
    ("parallel-unknown", ["--parallel", "bogus", "--nproc", "2", *TRAIN], "--parallel"),
    ("parallel-without-nproc", ["--parallel", "ddp", *TRAIN], "--parallel"),
    ("parallel-nobody-takes-it", ["--parallel", "ddp", "--nproc", "2", *GEMM], "--parallel"),
    ("no-baseline-without-parallel", ["--no-baseline", *TRAIN], "--no-baseline"),
    ("engine-unknown", ["--engine", "bogus", *LLM], "--engine"),
    ("engine-with-server", ["--engine", "vllm", *SERVER], "--engine"),
    ("engine-nobody-takes-it", ["--engine", "vllm", *GEMM], "--engine"),
    ("server-no-scheme", ["--server", "localhost:8000", *LLM], "--server"),
    ("server-no-host", ["--server", "http://", *LLM], "--server"),
    ("server-not-http", ["--server", "ftp://example.com", *LLM], "--server"),
    ("server-port-out-of-range", ["--server", "http://127.0.0.1:99999", *LLM], "--server"),
    ("server-not-a-url", ["--server", "not a url", *LLM], "--server"),
    ("server-nobody-takes-it", ["--server", "http://127.0.0.1:9", *GEMM], "--server"),
    ("served-model-without-server", ["--served-model", "m", *LLM], "--served-model"),
    ("served-model-empty", ["--served-model", "", *SERVER], "--served-model"),
    ("server-devices-zero", ["--server-devices", "0", *SERVER], "--server-devices"),
    ("server-devices-text", ["--server-devices", "abc", *SERVER], "--server-devices"),
    ("server-devices-without-server", ["--server-devices", "2", *LLM], "--server-devices"),
    ("engine-args-not-key-value", ["--engine-args", "foo", "--engine", "vllm", *LLM], "KEY=VALUE"),
    ("engine-args-no-key", ["--engine-args", "=1", "--engine", "vllm", *LLM], "KEY=VALUE"),
    ("engine-args-empty", ["--engine-args", "", *SERVER], "--engine-args"),
    ("engine-args-for-transformers", ["--engine-args", "a=1", *LLM], "--engine-args"),
    ("lengths-no-colon", ["--lengths", "128", *LLM], "--lengths"),
    ("lengths-not-numbers", ["--lengths", "a:b", *LLM], "--lengths"),
    ("lengths-zero", ["--lengths", "0:5", *LLM], "--lengths"),
    ("lengths-three-numbers", ["--lengths", "1:2:3", *LLM], "--lengths"),
    ("lengths-empty-item", ["--lengths", "128:32,", *LLM], "--lengths"),
    ("lengths-beyond-context", ["--lengths", "4000:200", *LLM], "4096"),
    ("input-len-without-output-len", ["--input-len", "16", *LLM], "--input-len"),
    ("input-len-zero", ["--input-len", "0", "--output-len", "4", *LLM], "--input-len"),
    ("input-len-text", ["--input-len", "abc", "--output-len", "4", *LLM], "--input-len"),
    ("input-len-with-lengths", ["--input-len", "16", "--output-len", "4", "--lengths", "8:8", *LLM], "--lengths"),
    ("output-len-without-input-len", ["--output-len", "4", *LLM], "--output-len"),
    ("output-len-negative", ["--input-len", "16", "--output-len", "-4", *LLM], "--output-len"),
    ("output-len-beyond-context", ["--input-len", "4090", "--output-len", "100", *LLM], "4096"),
    ("concurrency-text", ["--concurrency", "1,x", *SERVER], "--concurrency"),
    ("concurrency-zero", ["--concurrency", "0", *SERVER], "--concurrency"),
    ("concurrency-empty-item", ["--concurrency", "1,,2", *SERVER], "--concurrency"),
    ("concurrency-without-server", ["--concurrency", "2", *LLM], "--concurrency"),
    ("request-rate-text", ["--request-rate", "abc", *SERVER], "--request-rate"),
    ("request-rate-zero", ["--request-rate", "0", *SERVER], "--request-rate"),
    ("request-rate-nan", ["--request-rate", "nan", *SERVER], "--request-rate"),
    ("request-rate-without-server", ["--request-rate", "2", *LLM], "--request-rate"),
    ("num-prompts-zero", ["--num-prompts", "0", *SERVER], "--num-prompts"),
    ("num-prompts-text", ["--num-prompts", "abc", *SERVER], "--num-prompts"),
    ("num-prompts-without-server", ["--num-prompts", "4", *LLM], "--num-prompts"),
    ("length-range-above-one", ["--length-range", "2", *SERVER], "--length-range"),
    ("length-range-one", ["--length-range", "1", *SERVER], "--length-range"),
    ("length-range-negative", ["--length-range", "-0.1", *SERVER], "--length-range"),
    ("length-range-nan", ["--length-range", "nan", *SERVER], "--length-range"),
    ("length-range-without-server", ["--length-range", "0.1", *LLM], "--length-range"),
    ("slo-ttft-ms-zero", ["--slo-ttft-ms", "0", *LLM], "--slo-ttft-ms"),
    ("slo-ttft-ms-nan", ["--slo-ttft-ms", "nan", *LLM], "--slo-ttft-ms"),
    ("slo-ttft-ms-inf", ["--slo-ttft-ms", "inf", *LLM], "--slo-ttft-ms"),
    ("slo-ttft-ms-text", ["--slo-ttft-ms", "abc", *LLM], "--slo-ttft-ms"),
    ("slo-ttft-ms-nobody-takes-it", ["--slo-ttft-ms", "450", *GEMM], "--slo-ttft-ms"),
    ("slo-tpot-ms-negative", ["--slo-tpot-ms", "-40", *LLM], "--slo-tpot-ms"),
    ("slo-tpot-ms-inf", ["--slo-tpot-ms", "inf", *LLM], "--slo-tpot-ms"),
    ("train-steps-zero", ["--train-steps", "0", "-w", "numerics:llm-tiny"], "--train-steps"),
    ("train-steps-text", ["--train-steps", "abc", "-w", "numerics:llm-tiny"], "--train-steps"),
    ("train-steps-nobody-takes-it", ["--train-steps", "3", *GEMM], "--train-steps"),
    ("deterministic-nobody-takes-it", ["--deterministic", *GEMM], "--deterministic"),
    ("fp8-format-unknown", ["--fp8-format", "e3m4", "-w", "numerics:llm-tiny"], "--fp8-format"),
    ("fp8-format-nobody-takes-it", ["--fp8-format", "e5m2", *GEMM], "--fp8-format"),
    ("entry-no-colon", ["--entry", "mymodel", "-w", "numerics"], "--entry"),
    ("entry-nobody-takes-it", ["--entry", "mymodel:build", *GEMM], "--entry"),
    ("attention-shapes-two-numbers", ["--attention-shapes", "2x64", "-w", "attention:listed"], "--attention-shapes"),
    ("attention-shapes-zero", ["--attention-shapes", "2x64x0", "-w", "attention:listed"], "--attention-shapes"),
    ("attention-shapes-nobody-takes-it", ["--attention-shapes", "2x64x16", *GEMM], "--attention-shapes"),
    ("grouped-shapes-two-lists", ["--grouped-shapes", "8+8x16x8+8", "-w", "grouped-gemm:listed"],
     "--grouped-shapes"),
    ("grouped-shapes-all-empty", ["--grouped-shapes", "0+0x16x16", "-w", "grouped-gemm:listed"], "--grouped-shapes"),
    ("grouped-shapes-two-numbers", ["--grouped-shapes", "8+8x16", "-w", "grouped-gemm:listed"], "--grouped-shapes"),
    ("grouped-shapes-nobody-takes-it", ["--grouped-shapes", "8+8x16x16", *GEMM], "--grouped-shapes"),
    ("param-sets-text", ["--param-sets", "12*x", "-w", "optimizer:listed"], "--param-sets"),
    ("param-sets-zero-count", ["--param-sets", "4096*0", "-w", "optimizer:listed"], "--param-sets"),
    ("param-sets-nobody-takes-it", ["--param-sets", "4096*2", *GEMM], "--param-sets"),
    ("elementwise-ops-unknown", ["--elementwise-ops", "gelu,softplus", "-w", "elementwise:tiny"], "--elementwise-ops"),
    ("elementwise-ops-nobody-takes-it", ["--elementwise-ops", "gelu", *GEMM], "--elementwise-ops"),
    ("optimizer-unknown", ["--optimizer", "lion", "-w", "optimizer:tiny"], "--optimizer"),
    ("optimizer-nobody-takes-it", ["--optimizer", "sgd", *GEMM], "--optimizer"),
]


def _flags_of_run() -> set[str]:
    parser = build_parser()
    run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    return {a.option_strings[-1] if a.option_strings[-1].startswith("--") else a.option_strings[0]
            for a in run._actions if a.option_strings} - {"--help"}


def test_every_flag_of_run_has_a_bad_value_tried():
    tried = {words for _, _, words in CASES if words.startswith("--")}
    assert _flags_of_run() - tried == set()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GAPBENCH_DB", str(tmp_path / "history.sqlite"))
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "empty.py").write_text("x = 1\n")
    (tmp_path / "existing.json").write_text('{"schema_version": 1, "host": {}, "device": {"type": "cpu"}, '
                                            '"measurements": [], "run_id": "r"}\n')
    return tmp_path


@pytest.mark.parametrize("argv, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_value_is_one_line_and_exit_2_before_any_run(folder, capsys, argv, words):
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    try:
        rc = cli_main(["run", "--device", "cpu", "--no-history", "-q", *argv] if "--device" not in argv
                      else ["run", "--no-history", "-q", *argv])
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert rc == 2, (rc, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert words in err, err
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert after == before, "files written: " + ", ".join(sorted(set(after) - set(before)))


AXPY = ("import torch\n"
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


@pytest.mark.slow
def test_db_records_the_run_into_that_file_and_not_the_default(tmp_path):
    wf = tmp_path / "axpy.py"
    wf.write_text(AXPY)
    default, mine = tmp_path / "default.sqlite", tmp_path / "mine.sqlite"
    r = gapbench("run", "--device", "cpu", "--workload-file", wf, "-o", tmp_path / "o.json", "-q", "--db", mine,
                 env={"GAPBENCH_DB": str(default)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert history.workloads(mine) == [("axpy", 1)]
    assert not default.exists()
    r = gapbench("run", "--device", "cpu", "--workload-file", wf, "-o", tmp_path / "p.json", "-q", "--no-history",
                 env={"GAPBENCH_DB": str(default)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert history.workloads(mine) == [("axpy", 1)] and not default.exists()
