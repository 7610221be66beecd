"""The accelerator check (benchmarks/device_check.sh and its core, device_check.py) before any device time is spent
on it: its time plan, a dry run of the whole script on the test accelerator from a fresh folder into an absolute
output folder, a part stopped at its limit (SIGINT first, its partial results file used), the preflight, and the
wheels carried to a machine that reaches no registry (device_wheels.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import gapbench

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"
FIXTURES = Path(__file__).parent / "fixtures"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


dw = _module("device_wheels")
dc = _module("device_check")


def script_plan() -> list[tuple[str, float]]:
    text = SCRIPT.read_text()
    return dc.read_plan(re.search(r'^PLAN="\n(.*?)^"', text, re.S | re.M).group(1))


def test_the_time_plan_fits_its_quarter_hour_most_valuable_first():
    plan = script_plan()
    names = [n for n, _ in plan]
    known = dc.parts("cuda", "h200", dry=False)
    assert set(names) == set(known) and len(names) == len(set(names))  # every part once, none unknown
    assert sum(s for _, s in plan) <= dc.MAX_TOTAL_S == 480
    assert names[:2] == ["gemm-sweep", "gemm"]  # the max-achievable sweeps first, then fixed shapes
    assert names.index("membw") < names.index("models") < names.index("libs") < names.index("coverage")
    sweep = known["gemm-sweep"].argv
    assert "gemm:sweep" in sweep and sweep[sweep.index("--dtype") + 1] == "bf16,fp8"
    assert "gemm:shapes" in known["gemm"].argv  # the fixed shapes without the sweeps again
    for _, secs in plan:  # each part's own --budget leaves its grace and start-up inside its limit
        b = dc.budget_for(secs)
        assert b >= 1 and b + max(0.1 * b, 5.0) + 5 <= secs or secs <= 15


@pytest.mark.slow
def test_a_dry_run_of_the_whole_script_lands_at_most_eight_files_that_compare_reads(tmp_path):
    cwd = tmp_path / "elsewhere"  # not the checkout: the script finds its way from any folder
    cwd.mkdir()
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GAPBENCH_", "PYTHONPATH"))}
    env.update(PYTHON=sys.executable, HF_HUB_OFFLINE="1", no_proxy="*", http_proxy="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", OMP_NUM_THREADS="1")
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=900)
    summary = (out / "summary.txt").read_text()
    assert r.returncode in (0, 1), r.stderr[-3000:]
    lines = {ln.split()[0]: ln for ln in summary.splitlines()[4:] if ln.strip()}
    assert set(lines) == {n for n, _ in script_plan()}, summary
    for name, line in lines.items():  # every part ran, or said why not
        how = line.split()[1]
        assert how in ("ok", "partial", "skipped", "failed"), line
        if how != "ok":
            assert len(line.split()) > 4, f"{name} says no why: {line}"
    assert all(lines[n].split()[1] == "ok" for n in ("gemm-sweep", "gemm", "compare", "report", "env")), summary
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and set(files) >= {"summary.txt", "device-check.tar.gz", "compare.md", "report.html",
                                               "env.json"}, files
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    assert json.loads((out / "env.json").read_text())["device"]["type"] == "test"  # stdout only, no log lines
    assert not list(cwd.iterdir())  # nothing written where it was started
    with tarfile.open(out / "device-check.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    got = tmp_path / "x" / "device-check"
    results = [got / f"{n}.json" for n, _ in script_plan() if dc.parts("test", "t", True)[n].results
               and n != "coverage" and lines[n].split()[1] in ("ok", "partial")]
    assert len(results) >= 6 and all(p.is_file() for p in results)
    assert (got / "gemm-sweep.log").is_file() and (got / "coverage.json").is_file()
    for verb in (["compare", "--format", "md"], ["report", "-o", str(tmp_path / "r.html")]):
        c = gapbench(*verb, "--label", "test", *results, "--no-history", cwd=tmp_path)
        assert c.returncode == 0, c.stderr[-2000:]


def test_a_part_past_its_limit_gets_sigint_first_and_its_partial_results_are_used(tmp_path):
    part = dc.Part("slow", ["run", "--device", "cpu", "--workload-file", str(FIXTURES / "faulty_workloads.py"),
                            "-w", "faulty:slow", "--no-history", "-q", "-o", "slow.json"], "slow.json",
                   budget_flag=None)
    env = dict(os.environ, FAULTY_HOLD="1", PYTHONPATH=str(ROOT / "src"))  # the second variant sleeps a minute
    dc.run_part(part, 12.0, tmp_path, env)
    assert part.how == "partial" and "SIGINT" in part.why, (part.how, part.why)
    assert part.rows.get("ok", 0) >= 1 and part.rows["complete"] == 0 and part.took < 40
    data = json.loads((tmp_path / "slow.json").read_text())
    assert data["complete"] is False and data["measurements"][0]["status"] == "ok"


def test_preflight_names_what_is_missing(tmp_path):
    assert dc.unmet(["surely-no-such-distribution>=1"]) == [
        "surely-no-such-distribution (not installed; wanted >=1)"]
    assert dc.unmet(["pydantic>=999"])[0].startswith("pydantic (has ")
    assert dc.unmet(["pydantic>=2", "torch; python_version < '3'"]) == []
    part = dc.Part("needy", ["env"], needs=("surely-no-such-distribution",))
    stop, skipped = dc.preflight([part])
    assert stop == [] and skipped == {"needy": "surely-no-such-distribution not installed"}


def _wheel(folder: Path, name: str, version: str, requires=()) -> Path:
    """A real, installable pure-Python wheel: one module and its metadata."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}.py", f"VERSION = {version!r}\n")
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{meta}")
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def test_the_wheels_a_machine_needs_are_found_and_install_offline(tmp_path, monkeypatch):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels, "gbfixture-absent", "1.0", ["gbfixture-dep>=2"])
    _wheel(wheels, "gbfixture-dep", "2.1")
    _wheel(wheels, "gbfixture-unasked", "1.0")  # carried, needed by nothing
    _wheel(wheels, "packaging", "0.1")  # this interpreter's packaging fits: never replaced
    monkeypatch.setattr(dw, "gapbench_requirements", lambda extras=dw.EXTRAS: ["gbfixture-absent>=1", "packaging"])
    chosen = [p.name for p in dw.needed(wheels)]
    assert chosen == ["gbfixture_absent-1.0-py3-none-any.whl", "gbfixture_dep-2.1-py3-none-any.whl"]
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--target", str(site), *[str(wheels / c) for c in chosen]], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", "import gbfixture_absent, gbfixture_dep; print(gbfixture_dep.VERSION)"],
                       env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True)
    assert r.stdout.strip() == "2.1", r.stderr
    # a present distribution at a version a requirement refuses is carried, where the carried one fits
    monkeypatch.setattr(dw, "gapbench_requirements", lambda extras=dw.EXTRAS: ["packaging<0.2"])
    assert [p.name for p in dw.needed(wheels)] == ["packaging-0.1-py3-none-any.whl"]
    # an extra asked for (pathspec[re2]) brings what it needs, even where the distribution itself fits
    _wheel(wheels, "gbfixture-extra", "1.0", ["gbfixture-extradep; extra == 'fast'"])
    _wheel(wheels, "gbfixture-extradep", "1.0")
    monkeypatch.setattr(dw, "gapbench_requirements", lambda extras=dw.EXTRAS: ["gbfixture-extra[fast]>=1"])
    assert [p.name for p in dw.needed(wheels)] == ["gbfixture_extra-1.0-py3-none-any.whl",
                                                   "gbfixture_extradep-1.0-py3-none-any.whl"]


def test_what_to_carry_walks_the_requirements_the_machine_does_not_meet(tmp_path):
    index = {  # name -> (version, requirements, pure Python?)
        "pydantic": ("2.9", ["pydantic-core==2.23", "typing-extensions>=4.12", "annotated-types>=0.6"], True),
        "pydantic-core": ("2.23", ["typing-extensions>=4.6"], False),
        "annotated-types": ("0.7", [], True), "typing-extensions": ("4.12", [], True),
        "pathspec": ("1.1", ["google-re2>=1.1; extra == 're2'"], True), "google-re2": ("1.1", [], False),
        "scipy": ("1.14", ["numpy>=1.23"], False), "rich": ("13.9", ["pygments>=2"], True),
    }
    fetched_calls = []

    def read(name, spec):
        fetched_calls.append(name)
        if name not in index:
            return None
        v, req, pure = index[name]
        p = tmp_path / f"{name}-{v}.whl"
        p.write_text("")
        return p, v, req, pure

    machine = {"numpy": "2.5", "scipy": None, "typing-extensions": None, "rich": "13.9", "pygments": None,
               "pathspec": None}
    out = dw.plan_downloads(machine, ["torch>=2.4", "pydantic>=2.8", "scipy>=1.10", "rich>=13", "numpy>=1.24",
                                      "pathspec[re2]>=1.1"], read, lambda n: None)
    carried = set(out["fetched"])
    # absent: pydantic and its closure; present at an unknown version with a minimum wanted: the pure-Python
    # typing-extensions and pathspec, and pathspec's re2 extra; never torch; scipy is binary: assumed to fit
    assert carried == {"pydantic", "pydantic-core", "annotated-types", "typing-extensions", "pathspec", "google-re2"}
    assert "torch" not in fetched_calls and "numpy" not in fetched_calls and "rich" not in fetched_calls
    assert any("scipy" in n and "binary" in n for n in out["notes"])


def test_every_full_size_part_is_a_command_gapbench_accepts(tmp_path, monkeypatch):
    """The parts the H200 runs (not the dry run's): each `run` command passes the CLI's checks and builds its plan
    (workloads, presets and options known, values in range), each preset lists its variants on an accelerator, and
    the gemm parts measure no shape twice between them."""
    from gapbench import devices
    from gapbench import run as runner
    from gapbench.cli import build_parser
    from gapbench.cli.cmd_run import _check, _plan
    from gapbench.workloads import Context, get

    monkeypatch.chdir(tmp_path)
    ctx = Context(device=devices.resolve("test"), preset="standard")
    keys: dict[str, set] = {}
    for name, part in dc.parts("test", "h200", dry=False).items():
        if part.argv[0] != "run":
            continue
        args = build_parser().parse_args([*part.argv, "--budget", "60"])
        _check(args)
        plan = _plan(args, runner)
        assert plan.entries, name
        for wname, preset in plan.entries:
            w = get(wname)
            variants = w.variants(preset or w.default_preset, ctx)
            assert variants, (name, wname, preset)
            if wname == "gemm":
                keys[name] = {tuple(sorted(v.params.items())) for v in variants}
    assert keys["gemm"] and keys["gemm-sweep"] and not keys["gemm"] & keys["gemm-sweep"]


def test_a_malformed_time_plan_is_one_line_and_exit_2(tmp_path, capsys):
    for plan in ("gemm ten", "gemm -5", "gemm", "gemm inf", "bogus 5", "gemm 500"):
        assert dc.main(["--out", str(tmp_path / "o"), "--plan", plan]) == 2, plan
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("device_check: "), err
    assert not (tmp_path / "o").exists()  # nothing started, nothing written


def test_a_rerun_plan_from_the_environment_follows_the_same_rules(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "none")}
    for plan in ("llm-infer ten", "bogus 5", "llm-infer 500"):
        r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "o")], env={**env, "TIME_PLAN": plan},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, (plan, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("device_check: "), r.stderr
