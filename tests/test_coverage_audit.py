"""The coverage audit end to end: real OpInfo ops and test-only ops in real worker processes that hang,
crash and compute wrongly; journal and resume; bad input at the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from gapbench import results
from gapbench.coverage import audit, read_journal
from gapbench.coverage.audit import journal_path

EXTRA_OPS = textwrap.dedent('''
    """Test-only OpInfo entries: a hang, a crash, a custom op with a broken float32 kernel, a correct one."""
    import os
    import signal
    import time

    import torch
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput


    @torch.library.custom_op("gapbench_test::sloppy_sin", mutates_args=())
    def sloppy_sin(x: torch.Tensor) -> torch.Tensor:
        # the bug under test: everything but float64 is computed in half precision
        return torch.sin(x) if x.dtype == torch.float64 else torch.sin(x.half()).to(x.dtype)


    @torch.library.custom_op("gapbench_test::good_sin", mutates_args=())
    def good_sin(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)


    def _samples(op, device, dtype, requires_grad, **kw):
        for n in (5, 64):
            yield SampleInput(torch.linspace(-3, 3, n, device=device, dtype=dtype))


    def _hang(x):
        time.sleep(600)
        return x


    def _crash(x):
        os.kill(os.getpid(), signal.SIGSEGV)


    def extra_ops():
        kw = dict(dtypes=(torch.float32, torch.float64), sample_inputs_func=_samples, supports_autograd=False,
                  supports_out=False)
        return [OpInfo("gapbench_test.sloppy_sin", op=torch.ops.gapbench_test.sloppy_sin, **kw),
                OpInfo("gapbench_test.good_sin", op=torch.ops.gapbench_test.good_sin, **kw),
                OpInfo("gapbench_test.hang", op=_hang, **kw),
                OpInfo("gapbench_test.crash", op=_crash, **kw)]
''')

OPS = r"abs|fft\.fft|gapbench_test\..*"


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    d = tmp_path_factory.mktemp("cov")
    extra = d / "extra_ops.py"
    extra.write_text(EXTRA_OPS)
    out = d / "cov.json"
    rs = audit(device="cpu", dtypes="float32,float16", ops=OPS, extra_ops=str(extra), output=out, op_timeout_s=4,
               max_samples=4)
    return rs, out, extra


def _row(cov, op, dtype="float32"):
    rows = [r for r in cov["ops"] if r["op"] == op and r["dtype"] == dtype]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.slow
def test_audit_classifies_real_and_broken_ops(audited):
    rs, out, _ = audited
    cov = results.load(out).coverage  # the file on disk is a valid results file
    assert rs.measurements == [] and rs.complete
    assert _row(cov, "abs")["status"] == "native"
    assert _row(cov, "abs")["device_time_s"] > 0
    assert _row(cov, "abs", "float16")["status"] == "native"
    assert _row(cov, "fft.fft")["status"] == "native"
    fft_half = _row(cov, "fft.fft", "float16")
    assert fft_half["status"] == "unsupported", fft_half  # CPU has no Half FFT
    assert "Half" in fft_half["reason"]
    assert _row(cov, "gapbench_test.good_sin")["status"] == "native"
    sloppy = _row(cov, "gapbench_test.sloppy_sin")
    assert sloppy["status"] == "wrong_result"
    assert 1e-4 < sloppy["max_error"] < 1e-2  # half-precision rounding of sin: about 1e-3
    # float16 is not declared for the test ops: not applicable, not run
    assert _row(cov, "gapbench_test.hang", "float16")["status"] == "skipped"


@pytest.mark.slow
def test_a_hang_and_a_crash_do_not_end_the_audit(audited):
    rs, _, _ = audited
    cov = rs.coverage
    hang = _row(cov, "gapbench_test.hang")
    assert hang["status"] == "error" and hang["reason"].startswith("timeout"), hang
    crash = _row(cov, "gapbench_test.crash")
    assert crash["status"] == "error" and crash["reason"].startswith("crashed"), crash
    assert "SIGSEGV" in crash["reason"]
    # everything after them still ran
    assert len(cov["ops"]) == 6 * 2
    s = cov["summary"]
    assert s["total"] == 6 and s["error"] == 2 and s["wrong_result"] == 1 and s["unsupported"] == 1
    assert s["native"] == 2 and cov["families"]


@pytest.mark.slow
def test_resume_skips_finished_units(audited, tmp_path):
    rs, out, extra = audited
    header, rows = read_journal(journal_path(out))
    assert header["device"] == "cpu" and len(rows) == 12
    # keep the header and two finished units, marked so that a re-run would show
    lines = journal_path(out).read_text().splitlines()
    kept = [lines[0]]
    for line in lines[1:]:
        obj = json.loads(line)
        if obj["row"]["op"] in ("gapbench_test.hang", "gapbench_test.crash") and obj["row"]["dtype"] == "float32":
            obj["row"]["reason"] += " [from the journal]"
            kept.append(json.dumps(obj))
    part = tmp_path / "part.json.journal.jsonl"
    part.write_text("\n".join(kept) + "\n")
    rs2 = audit(device="cpu", dtypes="float32,float16", ops=OPS, extra_ops=str(extra), resume=part,
                op_timeout_s=4, max_samples=4)
    cov = rs2.coverage
    assert len(cov["ops"]) == 12 and rs2.complete
    assert _row(cov, "gapbench_test.hang")["reason"].endswith("[from the journal]")  # not run again
    assert _row(cov, "gapbench_test.crash")["reason"].endswith("[from the journal]")
    assert _row(cov, "gapbench_test.sloppy_sin")["status"] == "wrong_result"
    assert (tmp_path / "part.json").is_file()  # output derived from the journal's name
    assert len(read_journal(part)[1]) == 12


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gapbench", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (["--ops", "(unclosed"], "not a valid regular expression"),
    (["--dtype", "float33"], "unknown dtype"),
    (["--device", "cuda"], "not available"),
    (["--budget", "soon"], "--budget"),
])
def test_coverage_bad_input_is_one_line_and_exit_2(args, words, tmp_path):
    p = _cli("coverage", "--device", "cpu", *args, cwd=tmp_path) if "--device" not in args else \
        _cli("coverage", *args, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert words in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_coverage_resume_of_a_foreign_file_is_refused(tmp_path):
    bogus = tmp_path / "notes.jsonl"
    bogus.write_text("hello\nworld\n")
    p = _cli("coverage", "--device", "cpu", "--resume", str(bogus), "--ops", "abs", cwd=tmp_path)
    assert p.returncode == 2
    assert "not a coverage journal" in p.stderr or "not JSON" in p.stderr


@pytest.mark.slow
def test_the_budget_stops_the_audit_and_leaves_the_rest_for_resume(audited, tmp_path):
    _, _, extra = audited
    out = tmp_path / "budget.json"
    t0 = time.monotonic()
    rs = audit(device="cpu", dtypes="float32", ops=r"gapbench_test\.(hang|good_sin)", extra_ops=str(extra),
               output=out, op_timeout_s=300, budget_s=12, max_samples=2)
    assert time.monotonic() - t0 < 60
    cov = rs.coverage
    assert not rs.complete
    # good_sin (first) may or may not fit in the budget on a loaded machine; the hang never finishes, and is
    # left for --resume rather than called a timeout
    ran = [r["op"] for r in cov["ops"]]
    assert "gapbench_test.hang" not in ran and set(ran) <= {"gapbench_test.good_sin"}
    assert cov["not_audited"] == 2 - len(ran) >= 1
    assert results.load(out).complete is False
    assert len(read_journal(journal_path(out))[1]) == len(ran)
