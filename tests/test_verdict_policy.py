"""One verdict policy for every verb that judges: the spread a single run is judged by (the history's unflagged runs,
else the class default) and what each output says about it; the host watch's flags in run, history and assess;
files given for a stack they did not run on. Real results files from results/, real SQLite history files, real
`python -m gapbench` subprocesses."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gapbench
from gapbench import history
from gapbench.compare import platform_identity
from gapbench.report.runs import history_table
from gapbench.results import load, save

RESULTS = Path(__file__).resolve().parents[1] / "results"
ONE = RESULTS / "cpu-epyc-2core-quick-1thread.json"
TWO = RESULTS / "cpu-epyc-2core-quick-2threads.json"
VERDICTS = RESULTS / "cpu-epyc-2core-verdicts"
BUSY_SOURCE = VERDICTS / "t2-1.json"  # three runs on a busy 2-core VM: the host watch flagged five rows


def _busy_watch() -> dict:
    """The host watch of a row that a busy host disturbed, as the shipped run recorded it."""
    return next(m.host_watch for m in load(BUSY_SOURCE).measurements if m.flagged)


def _busy_runs(tmp_path: Path) -> list[Path]:
    """The shipped 1- and 2-thread runs measured again on a busy host: each row moved by what the neighbours took
    (as the flagged runs of t2-1.json moved: down to about half) and flagged by the host watch."""
    watch, out = _busy_watch(), []
    for src in (ONE, TWO):
        rs = load(src)
        for k, factor in enumerate((0.5, 0.8, 1.3)):
            ms = [m.replace(value=m.value * factor, stats=None, host_watch=watch) if m.ok else m
                  for m in rs.measurements]
            busy = rs.replace(run_id=f"{rs.run_id}-busy{k}", measurements=ms,
                              started_at=f"2026-12-02T0{k}:00:00+00:00")
            path = tmp_path / f"{src.stem}-busy{k}.json"
            save(busy, path)
            out.append(path)
    return out


def _verdicts(*args, env=None) -> dict:
    p = gapbench("compare", "--label", "1t", ONE, "--label", "2t", TWO, "--json", *args, env=env)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    return {(r["workload"], json.dumps(r["variant"], sort_keys=True)): r["gaps"]["2t"] for r in rows}


def test_flagged_runs_never_enter_the_history_spread(tmp_path):
    db = tmp_path / "h.sqlite"
    files = sorted(VERDICTS.glob("t1-*.json"))
    p = gapbench("history", "--import", *files, "--db", db)
    assert p.returncode == 0, p.stderr
    ident = platform_identity(load(ONE))
    triad = {"kernel": "triad", "dtype": "fp32", "elements": 33554432}
    assert load(files[0]).measurements[-2].flagged  # t1-1's triad was flagged: four of five runs count
    _, n = history.run_spread(ident, "membw", triad, db_path=db)
    assert n == 4
    _, n = history.run_spread(ident, "membw", {**triad, "kernel": "copy"}, db_path=db)
    assert n == 5
    gaps = _verdicts("--db", db)
    basis = gaps[("membw", json.dumps(triad, sort_keys=True))]["spread_basis"]
    assert set(basis.split(", ")) == {"history n=4", "cpu default"}  # 1t: its history; 2t: none of its own


@pytest.mark.slow
def test_the_shipped_compare_gives_one_verdict_with_and_without_a_history_of_busy_runs(tmp_path):
    db = tmp_path / "busy.sqlite"
    p = gapbench("history", "--import", *_busy_runs(tmp_path), "--db", db)
    assert p.returncode == 0, p.stderr
    with_db = _verdicts("--db", db)
    without = _verdicts("--no-history")
    empty = _verdicts(env={"GAPBENCH_DB": str(tmp_path / "none.sqlite")})
    assert {k: g["verdict"] for k, g in with_db.items()} == {k: g["verdict"] for k, g in without.items()} == {
        k: g["verdict"] for k, g in empty.items()}
    bf16 = with_db[("gemm", json.dumps({"dtype": "bf16", "k": 1024, "m": 1024, "n": 1024}, sort_keys=True))]
    assert bf16["verdict"] == "significant" and bf16["spread_basis"] == "cpu default"
    assert round(bf16["interval_pct"][0], 1) == 60.7
    # the terminal says what judged the gaps
    p = gapbench("compare", "--label", "1t", ONE, "--label", "2t", TWO, "--db", db)
    assert "Judged by: cpu default (12 gaps)." in " ".join(p.stdout.split())


def test_verbs_that_read_the_history_take_db_and_no_history(tmp_path):
    missing = tmp_path / "missing.sqlite"
    for verb in (["compare", ONE, TWO], ["report", ONE, TWO, "-o", tmp_path / "r.html"]):
        p = gapbench(*verb, "--db", missing)
        assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
        assert f"--db {missing}: no such history database" in p.stderr
        p = gapbench(*verb, "--db", missing, "--no-history")
        assert p.returncode == 2 and "--no-history" in p.stderr
    p = gapbench("report", ONE, TWO, "--no-history", "-o", tmp_path / "r.md")
    assert p.returncode == 0, p.stderr
    p = gapbench("assess", RESULTS, "--target", "cpu", "--db", missing)
    assert p.returncode == 2 and "no such history database" in p.stderr


def test_history_shows_the_flag_and_judges_each_change(tmp_path):
    db = tmp_path / "h.sqlite"
    assert gapbench("history", "--import", *sorted(VERDICTS.glob("t2-*.json")), "--db", db).returncode == 0
    p = gapbench("history", "--workload", "membw", "--variant", "kernel=copy", "--db", db)
    assert p.returncode == 0, p.stderr
    assert "host watch" in p.stdout and "†" in p.stdout
    table = history_table("membw", history.rows("membw", variant={"kernel": "copy"}, db_path=db))
    flag, change = table.headers.index("host watch"), table.headers.index("change")
    assert table.rows[0][flag] == "† run 1: host busy: other processes took 1.0 of 2 CPUs; load 1.2"
    assert [r[flag] for r in table.rows[1:]] == [""] * 4
    assert all(r[change].endswith("(history n=4)") for r in table.rows[1:])  # its four unflagged runs judge
    rows = json.loads(gapbench("history", "--workload", "membw", "--json", "--db", db).stdout)["rows"]
    assert sum(1 for r in rows if r["flag"]) == 4


@pytest.mark.slow
def test_run_shows_the_host_watch_in_its_table_and_says_the_host_was_busy(tmp_path):
    spin = "import multiprocessing as mp, time\n" \
           "def f():\n    while True: pass\n" \
           "if __name__ == '__main__':\n    [mp.Process(target=f, daemon=True).start() for _ in range(3)]\n" \
           "    time.sleep(120)\n"
    hog = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    try:
        p = gapbench("run", "-w", "membw:tiny", "--no-history", "-o", tmp_path / "busy.json", "--quiet",
                     env={"COLUMNS": "250"})
    finally:  # the spinners are the hog's children: a kill of the hog alone would leave them spinning
        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "host watch" in text and "† host busy: other processes took" in text
    assert "measured on a busy host: rerun idle, or compare with --allow-flagged" in text


@pytest.mark.slow
def test_assess_withholds_a_speed_on_flagged_rates_and_names_a_target_file_of_another_stack(tmp_path):
    import gapbench as api
    from gapbench.report.assess import render_json, render_markdown

    source = load(RESULTS / "cpu-epyc-2core-assess-accuracy" / "rates-1t.json")
    target = load(RESULTS / "cpu-epyc-2core-assess-accuracy" / "rates-2t.json")
    watch = _busy_watch()
    busy = target.replace(measurements=[m.replace(host_watch=watch) if m.ok else m for m in target.measurements])
    a = api.assess(Path(__file__).parent / "fixtures" / "assess", target="rocm", like="llm-train:tiny",
                   results=[source, busy], history=False)
    md = render_markdown(a)
    lines = [x for x in md.splitlines() if x]
    assert "ran on cpu (AMD EPYC), not on AMD ROCm (--target rocm)" in lines[0]
    assert "measured on a disturbed host" in lines[1] and md.count("measured on a disturbed host") == 1
    assert "expected speed: no verdict" in lines[2] and "[" not in lines[2].split("expected speed")[1]
    doc = json.loads(render_json(a))
    assert doc["speed_verdict"]["verdict"] == "no verdict" and doc["mismatches"]
    judged = api.assess(Path(__file__).parent / "fixtures" / "assess", target="cpu", like="llm-train:tiny",
                        results=[source, busy], history=False, allow_flagged=True)
    assert judged.mismatches == [] and json.loads(render_json(judged))["speed_verdict"]["verdict"] != "no verdict"
