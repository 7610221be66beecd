"""Hostile event lines, workload files and command lines through gapbench: does any end in an internal error, a
hang, a traceback, an error of more than one line, a destroyed file, a process left running, or a result accepted
for a variant its worker was not started for?

    PYTHONPATH=src python benchmarks/fuzz_runs.py [--events 10000] [--argv 10000] [--workload-files 120]
                                                  [--event-runs 30] [--seed 1] [--out FILE]

Four parts, each seeded:

- **event lines** (in process): a worker's event stream (hello, variants, two start/result pairs, done) with one
  or more lines mutated (a hostile value in a field, a field deleted, NaN and Infinity tokens, a result for
  another workload or another variant, a result before its start, a repeated result, unknown kinds, 100,000
  keys, cut or flipped bytes) goes through the parent's reader (`engine.channel.split_events`) and its event
  handler (`run.workload.run_workload`) with a launcher that replays the lines instead of starting a process.
  Counted: exceptions out of the handler, time limits that are not a finite number of seconds, records that
  are not valid, and `ok` results accepted for a workload or variant the stream did not start.
- **event lines in real runs**: a sample of single hostile lines written by a real workload's variant to its
  event channel during `gapbench run`; the variant after it must still be measured, the run must end with its
  results file, and no row may belong to another workload.
- **workload files**: user workload files that misbehave at a seeded point (import, `variants()`, `run()`):
  raise, exit, crash, hang, print to the channels, return the wrong things, fork and leave the session,
  announce 100,000 variants; each through a real `gapbench run --workload-file` with a good variant first.
  Counted besides: a lost good row, a missing or invalid results file, a process still alive after the run.
- **command lines** (in process, `gapbench.cli.main`): every verb's flags and positional arguments, from the
  parser itself, given hostile values — numbers out of range, NaN, huge integers, escapes, 5,000-character
  strings, non-UTF-8 names, and the paths of protected files: a source file, a CUDA file, a results file, a
  history database, an interrupted run's journal, a FIFO, a character device (made here when running as root),
  a symlink out of the folder. After every call each protected file is checked: a results file may change
  only under `--force` and must still load, the history must stay a readable database that lost no row, the
  others must not change at all.

The target is zero findings of every kind. A summary (JSON) goes to standard output and to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ["PYTHONPATH"] = str(REPO / "src")  # the workers that in-process runs start import this checkout too
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_inputs import Hang, Tally, call_inproc  # noqa: E402 - the sibling benchmark's call and tally

CALL_LIMIT_S = 30
RUN_LIMIT_S = 120
SEED_RESULTS = REPO / "results" / "cpu-epyc-2core-quick-1thread.json"
HOSTILE_VALUES = [None, True, False, 0, -1, -0.0, 1.5, 1e308, 5e-324, 10**30, -(10**30), 2**63, "", "7", "NaN",
                  "x" * 3000, "\x1b[2J\x1b]0;t\x07", "[red]x[/]", [], {}, [1, 2, 3], {"a": {"b": [1]}},
                  "gemm", "../../etc/passwd"]
RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 400, '"\\ud800"', "[" * 300 + "]" * 300]


def _finding_kinds() -> tuple[str, ...]:
    return ("internal errors", "hangs", "tracebacks", "errors not on one line", "bad time limits",
            "invalid records accepted", "foreign results accepted", "good rows lost", "results files missing",
            "files destroyed", "processes left", "invalid JSON out", "schema-invalid files accepted")


FINDINGS = _finding_kinds()


def headline(t: Tally) -> dict:
    return {"calls": t.c["calls"], **{k: t.c[k] for k in FINDINGS}}


def exits(t: Tally) -> dict:
    return {k.removeprefix("exit "): v for k, v in sorted(t.c.items()) if k.startswith("exit ")}


# ---- event lines, in process ----------------------------------------------------------------------------

WORKLOAD, PRESET = "fuzzed", "p"


def base_stream() -> list[dict]:
    """A worker's events for two variants, as engine.worker sends them."""
    from gapbench.results import variant_key

    params = [{"n": 1}, {"n": 2}]
    keys = [variant_key(WORKLOAD, PRESET, p) for p in params]
    ev: list[dict] = [{"event": "hello", "pid": 1, "device": {"type": "cpu", "product": "fuzz"}},
                      {"event": "variants", "total": 2, "todo": 2, "keys": keys, "variants": params,
                       "unit": "calls/s", "higher_is_better": True}]
    for k, p in zip(keys, params, strict=True):
        m = {"workload": WORKLOAD, "preset": PRESET, "variant": p, "unit": "calls/s", "status": "ok", "value": 10.0,
             "stats": {"median": 0.1, "iqr": 0.0, "min": 0.1, "max": 0.1, "n": 3, "ci95": [0.1, 0.1]}}
        ev += [{"event": "start", "key": k, "variant": p, "budget_s": 1.0}, {"event": "result", "key": k,
                                                                              "measurement": m}]
    return json.loads(json.dumps(ev + [{"event": "done"}]))  # no dict shared between events


def _field_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _field_paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield prefix + (i,)
            yield from _field_paths(v, prefix + (i,))


def _set(doc, path, value):
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


def _del(doc, path):
    for p in path[:-1]:
        doc = doc[p]
    del doc[path[-1]]


def mutate_stream(rng: random.Random) -> tuple[list[bytes], str]:
    """The lines of one mutated stream, and what was done."""
    evs = base_stream()
    what = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        kind = rng.choice(["value"] * 5 + ["delete", "token", "foreign", "order", "repeat", "unknown", "many",
                                           "bytes", "extra"])
        i = rng.randrange(len(evs))
        what.append(f"{kind}@{evs[i].get('event')}")
        if kind == "value":
            paths = [p for p in _field_paths(evs[i]) if p != ("event",)] or [("x",)]
            _set(evs[i], rng.choice(paths), json.loads(json.dumps(rng.choice(HOSTILE_VALUES))))
        elif kind == "delete":
            paths = list(_field_paths(evs[i]))
            if paths:
                _del(evs[i], rng.choice(paths))
        elif kind == "token":
            paths = [p for p in _field_paths(evs[i]) if p != ("event",)] or [("x",)]
            _set(evs[i], rng.choice(paths), "@@TOKEN@@")
        elif kind == "foreign":
            r = [e for e in evs if e.get("event") == "result" and isinstance(e.get("measurement"), dict)]
            if r:
                m = rng.choice(r)["measurement"]
                choice = rng.choice(["workload", "variant", "preset"])
                m.update({"workload": "gemm", "value": 1e30} if choice == "workload" else
                         {"variant": {"n": 99}} if choice == "variant" else {"preset": "other"})
        elif kind == "order":
            j = rng.randrange(len(evs))
            evs[i], evs[j] = evs[j], evs[i]
        elif kind == "repeat":
            evs.insert(i, json.loads(json.dumps(evs[i])))
        elif kind == "unknown":
            evs.insert(i, {"event": rng.choice(["result2", "", "x" * 500, "start "]), "key": "k"})
        elif kind == "many":
            n = rng.choice([20_000, 100_000])
            evs[1] = {"event": "variants", "total": n, "todo": n, "keys": [f"k{j}" for j in range(n)],
                      "variants": [{"j": j} for j in range(n)], "unit": "u"}
        elif kind == "extra":
            evs[i]["x-extra"] = rng.choice(HOSTILE_VALUES)
    lines = []
    for e in evs:
        line = json.dumps(e, allow_nan=True, default=str).encode()
        if b'"@@TOKEN@@"' in line:
            line = line.replace(b'"@@TOKEN@@"', rng.choice(RAW_TOKENS).encode(), 1)
        lines.append(line)
    if "bytes" in " ".join(what):
        i = rng.randrange(len(lines))
        b = bytearray(lines[i])
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        lines[i] = bytes(b[: rng.randrange(1, len(b) + 1)])
    return lines, ", ".join(what)


def replay(lines: list[bytes], tally: Tally, label: str):
    """A launcher that replays `lines` through the parent's reader instead of starting a worker."""
    from gapbench.engine.channel import split_events
    from gapbench.engine.supervise import Outcome

    def launch(job, timeout_s, on_event):
        buf = b"".join(line + b"\n" for line in lines)
        events, _ = split_events(buf)
        for ev in events:
            limit = on_event(ev)
            if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit) and
                                          0 < limit <= 10**7):
                tally.note("bad time limits", f"{label}: {limit!r} after {str(ev)[:120]}")
        return Outcome(events=events, returncode=0)

    return launch


def judge_accepted(got: list, tally: Tally, label: str) -> None:
    from gapbench.results import Measurement

    base = {json.dumps(e["variant"], sort_keys=True) for e in base_stream() if e["event"] == "start"}
    for m in got:
        try:
            Measurement.read(m.model_dump(mode="json"))
        except Exception as e:  # noqa: BLE001 - any refusal is the finding
            tally.note("invalid records accepted", f"{label}: {e.__class__.__name__}: {str(e)[:120]}")
            continue
        if m.status == "ok" and (m.workload != WORKLOAD or m.preset != PRESET or
                                 json.dumps(m.variant, sort_keys=True) not in base):
            tally.note("foreign results accepted", f"{label}: {m.workload} {m.preset} {m.variant} = {m.value}")


def fuzz_events(n: int, rng: random.Random, tally: Tally) -> None:
    from gapbench.engine.jobs import WorkloadJob
    from gapbench.run.workload import Reporter, run_workload

    def alarm(signum, frame):
        raise Hang

    old = signal.signal(signal.SIGALRM, alarm)
    try:
        for _ in range(n):
            lines, what = mutate_stream(rng)
            got: list = []
            tally.c["calls"] += 1
            signal.alarm(CALL_LIMIT_S)
            try:
                run_workload(WorkloadJob(workload=WORKLOAD, device="cpu", preset=PRESET), replay(lines, tally, what),
                             timeout_s=None, reporter=Reporter(), on_result=got.append)
                tally.c["exit 0"] += 1
            except Hang:
                tally.note("hangs", what)
            except Exception as e:  # noqa: BLE001 - anything out of the handler would end the run
                tally.note("internal errors", f"{what}: {e.__class__.__name__}: {str(e)[:160]}")
            finally:
                signal.alarm(0)
            judge_accepted(got, tally, what)
    finally:
        signal.signal(signal.SIGALRM, old)


# ---- real runs: event lines and workload files --------------------------------------------------------------

WORKLOAD_FILE = '''
import os, signal, subprocess, sys, time
from gapbench.timing import time_fn
from gapbench.workloads import Variant, Workload

WHERE, ACTION, MARK = {where!r}, {action!r}, {mark!r}
LINE = {line!r}


def act():
    a = ACTION
    if a == "raise":
        raise RuntimeError("raised on purpose\\nover two lines\\x1b[2J")
    if a == "exit0":
        sys.exit(0)
    if a == "exit3":
        os._exit(3)
    if a == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if a == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if a == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    if a == "hang":
        time.sleep(3600)
    if a == "stdout":
        sys.stdout.write("{{\\"event\\": \\"result\\"}}\\n" * 100)
        sys.stdout.flush()
    if a == "stderr":
        sys.stderr.write("\\x1b[2J" + "noise " * 100000)
    if a == "close_fds":
        os.closerange(0, 3)
    if a == "escape":  # a grandchild in its own session with an empty environment
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execve("/bin/sh", ["/bin/sh", "-c", "sleep 300; : " + MARK], {{}})
            os._exit(0)
    if a == "child":
        subprocess.Popen(["/bin/sh", "-c", "sleep 300; : " + MARK], start_new_session=True)
    if a == "line":
        fd = os.open(os.environ["GAPBENCH_EVENTS"], os.O_WRONLY | os.O_APPEND)
        os.write(fd, LINE + b"\\n")
        os.close(fd)
    if a == "alloc":
        b = bytearray(2**40)
    if a == "recursion":
        def f(): return f()
        f()


if WHERE == "import":
    act()


class Fuzzed(Workload):
    name = "fuzzed"
    unit = "calls/s"
    description = "a workload that misbehaves at one point"
    presets = {{"p": "three variants, the middle one misbehaving"}}
    default_preset = "p"

    def variants(self, preset, ctx):
        if WHERE == "variants":
            act()
        if ACTION == "many" and WHERE == "variants":
            return [Variant({{"i": i}}) for i in range(100_000)]
        if ACTION == "wrong" and WHERE == "variants":
            return [{{"not": "a variant"}}, 7]
        return [Variant({{"mode": "good"}}), Variant({{"mode": "bad"}}), Variant({{"mode": "after"}})]

    def run(self, variant, ctx):
        if variant.params.get("mode") == "bad" and WHERE == "run":
            act()
            if ACTION == "wrong":
                return "not a measurement"
            if ACTION == "nan":
                return self.result(variant, ctx, value=float("nan"))
        t = time_fn(lambda: sum(range(100)), ctx.device, budget_s=0.05, min_time_s=0.005, repeats=3)
        return self.throughput(variant, ctx, t, 1.0)
'''

ACTIONS = ["raise", "exit0", "exit3", "segv", "kill", "term", "hang", "stdout", "stderr", "close_fds", "escape",
           "child", "line", "alloc", "recursion", "wrong", "nan", "many"]
WHERES = ["import", "variants", "run", "run", "run"]


def hostile_line(rng: random.Random) -> bytes:
    lines, _ = mutate_stream(rng)
    return rng.choice(lines)[:100_000]


def leftover(mark: str) -> list[int]:
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and mark in " ".join(p.info["cmdline"] or []):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def run_once(work: Path, where: str, action: str, line: bytes, tally: Tally, label: str) -> None:
    from gapbench.results import load

    mark = f"gapbench-fuzz-{uuid.uuid4().hex[:12]}"
    wf = work / f"{mark}.py"
    wf.write_text(textwrap.dedent(WORKLOAD_FILE.format(where=where, action=action, mark=mark, line=line)))
    out = work / f"{mark}.json"
    argv = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--workload-file", str(wf), "-w", "fuzzed",
            "--timeout", "6", "--variant-budget", "0.2", "--repeats", "3", "--memory-limit", "4", "--no-history",
            "--quiet", "-o", str(out)]
    tally.c["calls"] += 1
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=RUN_LIMIT_S,
                           env=dict(os.environ, PYTHONPATH=str(REPO / "src")), cwd=work)
    except subprocess.TimeoutExpired:
        tally.note("hangs", label)
        return
    tally.c[f"exit {p.returncode}"] += 1
    if p.returncode == 1 and "internal error" in p.stderr:
        tally.note("internal errors", f"{label}: {p.stderr.strip()[-200:]}")
    if "Traceback" in p.stderr:
        tally.note("tracebacks", f"{label}: {p.stderr.strip()[-200:]}")
    if p.returncode == 2 and len(p.stderr.strip().splitlines()) != 1:
        tally.note("errors not on one line", f"{label}: {p.stderr.strip()[:200]}")
    time.sleep(0.2)
    left = leftover(mark)
    if left:
        tally.note("processes left", f"{label}: {left}")
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    if p.returncode not in (0, 2):
        return
    if not out.exists():
        if p.returncode == 0:
            tally.note("results files missing", label)
        return
    try:
        rs = load(out)
    except Exception as e:  # noqa: BLE001
        tally.note("invalid records accepted", f"{label}: {e.__class__.__name__}: {str(e)[:160]}")
        return
    rows = {str(m.variant.get("mode")): m for m in rs.measurements if m.workload == "fuzzed"}
    if any(m.workload != "fuzzed" for m in rs.measurements):
        tally.note("foreign results accepted", f"{label}: {[m.workload for m in rs.measurements]}")
    if where == "run" and action not in ("many",):
        for mode in ("good", "after"):
            if mode not in rows or rows[mode].status != "ok":
                tally.note("good rows lost", f"{label}: {mode}: {rows.get(mode) and rows[mode].reason}")
    for f in (wf, out):
        f.unlink(missing_ok=True)


def fuzz_real_runs(n_lines: int, n_files: int, rng: random.Random, lines_tally: Tally, files_tally: Tally,
                   work: Path) -> None:
    for i in range(n_lines):
        line = hostile_line(rng)
        run_once(work, "run", "line", line, lines_tally, f"line {i}: {line[:80]!r}")
        print(f"event line run {i + 1}/{n_lines}: {dict(headline(lines_tally))}", file=sys.stderr)
    for i in range(n_files):
        where, action = rng.choice(WHERES), rng.choice(ACTIONS)
        line = hostile_line(rng) if action == "line" else b""
        run_once(work, where, action, line, files_tally, f"{action} at {where}")
        print(f"workload file {i + 1}/{n_files}: {dict(headline(files_tally))}", file=sys.stderr)


# ---- command lines ------------------------------------------------------------------------------------------

class Protected:
    """Files no command line may destroy, and how each may legitimately change."""

    def __init__(self, work: Path):
        self.work = work
        self.outside = work.parent / (work.name + "-outside")
        self.outside.mkdir(exist_ok=True)
        self.make()

    def make(self) -> None:
        w = self.work
        (w / "src.py").write_text("import torch\nx = torch.ones(3).cuda()\n")
        (w / "kern.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] = 0; }\n")
        shutil.copy(SEED_RESULTS, w / "results.json")
        (w / "x.json.journal.jsonl").write_text(json.dumps({"event": "header", "run_id": "r"}) + "\n")
        db = w / "history.sqlite"
        if not db.exists():
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                call_inproc(["history", "--import", str(w / "results.json"), "--db", str(db)])
        if not (w / "fifo").exists():
            os.mkfifo(w / "fifo")
        if os.geteuid() == 0 and not (w / "null").exists():
            os.mknod(w / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (self.outside / "target.txt").write_text("outside\n")
        if not (w / "link-out").is_symlink():
            (w / "link-out").unlink(missing_ok=True)  # replaced by a plain file, as an output named it
            (w / "link-out").symlink_to(self.outside / "target.txt")
        (w / "dir").mkdir(exist_ok=True)
        (w / "dir" / "a.py").write_text("import torch\n")
        self.before = self.state()
        self.rows = self.history_rows()

    def names(self) -> list[str]:
        return ["src.py", "kern.cu", "results.json", "x.json.journal.jsonl", "history.sqlite", "fifo", "null",
                "link-out", "dir/a.py"]

    def paths(self) -> list[str]:
        return [str(self.work / n) for n in self.names()] + [str(self.outside / "target.txt")]

    def state(self) -> dict:
        s = {}
        for name in self.names() + ["../" + self.outside.name + "/target.txt"]:
            p = self.work / name
            try:
                st = os.lstat(p)
            except OSError:
                s[name] = None
                continue
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            s[name] = (stat.S_IFMT(st.st_mode), st.st_ino, digest)
        return s

    def history_rows(self) -> int:
        try:
            with sqlite3.connect(f"file:{self.work / 'history.sqlite'}?mode=ro", uri=True) as c:
                return sum(c.execute(f"select count(*) from {t}").fetchone()[0] for (t,) in
                           c.execute("select name from sqlite_master where type='table'"))
        except sqlite3.Error:
            return -1

    def check(self, argv: list[str], tally: Tally, label: str) -> None:
        from gapbench.results import load

        now = self.state()
        broken = []
        for name, was in self.before.items():
            if now[name] == was:
                continue
            if name == "results.json" and "--force" in argv and now[name] is not None and now[name][0] == stat.S_IFREG:
                try:
                    load(self.work / name)
                    continue
                except Exception:  # noqa: BLE001
                    pass
            if name == "history.sqlite" and now[name] is not None and now[name][0] == stat.S_IFREG \
                    and self.history_rows() >= self.rows:
                continue
            if name == "x.json.journal.jsonl" and "--resume" in argv:
                continue
            if name in ("src.py", "kern.cu", "dir/a.py", "link-out") and str(self.work / name) in outputs(argv) \
                    and name not in inputs(argv, self.work) and now[name] is not None \
                    and now[name][0] == stat.S_IFREG:
                continue  # a plain file named as the output is replaced as asked (a link: the link, not its target)
            if name.endswith("/target.txt") and str(self.outside / "target.txt") in outputs(argv) \
                    and now[name] is not None and now[name][0] == stat.S_IFREG:
                continue  # the file outside, named itself as the output
            broken.append(name)
        if broken:
            tally.note("files destroyed", f"{label}: {broken}")
        for entry in self.work.iterdir():  # what the call wrote goes; the protected files are made again
            if entry.name not in {n.split("/")[0] for n in self.names()}:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        if broken or now != self.before:
            for name in broken:
                p = self.work / name
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                elif p.exists() or p.is_symlink():
                    p.unlink()
            self.make()


def outputs(argv: list[str]) -> set[str]:
    """The paths a command line names as its output."""
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-o", "--output")} | \
        {a.split("=", 1)[1] for a in argv if a.startswith("--output=")}


def inputs(argv: list[str], work: Path) -> set[str]:
    """The protected files a command line also reads (named anywhere but as its output)."""
    named = [Path(a) for i, a in enumerate(argv) if i == 0 or argv[i - 1] not in ("-o", "--output")]
    read = set()
    for p in named:
        if p.is_absolute() and (p == work or work in p.parents):
            rel = "" if p == work else str(p.relative_to(work))
            read |= {n for n in ("src.py", "kern.cu", "dir/a.py", "link-out")
                     if rel in ("", n) or n.startswith(rel + "/")}
    return read


def verb_flags() -> dict[str, tuple[list, list]]:
    """Each verb's (optional flags with whether they take a value, positional argument names), from the parser."""
    from gapbench.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for verb, p in sub.choices.items():
        flags, positional = [], []
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            if a.option_strings:
                flags.append((a.option_strings[-1], a.nargs != 0, list(a.choices) if a.choices else None))
            else:
                positional.append((a.dest, a.nargs))
        out[verb] = (flags, positional)
    return out


CHEAP_WEIGHT = {"run": 2, "coverage": 1, "ops": 1, "frameworks": 1, "assess": 2}


def argv_value(rng: random.Random, protected: Protected) -> str:
    pool = ["", "-", "0", "-1", "1", "3", "0.001", "1e308", "nan", "inf", "-inf", "99999999999999999999", "1.5",
            "cpu", "test", "cuda", "bf16", "fp8,int8", "fp32", "bogus", "gemm", "gemm:tiny", "launch:tiny", "rocm",
            "\x1b[2J\x1b]0;t\x07", "[red]x[/]", "a" * 5000, "bad\udcffname", "../" * 20 + "etc", "'; rm -rf ~",
            "x.json", "out.json", "new/out.html", "1,2", "auto"]
    return rng.choice(pool + protected.paths() * 2)


def make_argv(verb: str, spec: tuple[list, list], rng: random.Random, protected: Protected) -> list[str]:
    flags, positional = spec
    argv = [verb]
    for _dest, nargs in positional:
        count = {None: 1, "?": rng.randint(0, 1), "*": rng.randint(0, 2), "+": rng.randint(1, 2)}.get(nargs, 1)
        argv += [argv_value(rng, protected) for _ in range(count if isinstance(count, int) else 1)]
    for _ in range(rng.randint(0, 4)):
        if not flags:
            break
        name, takes, choices = rng.choice(flags)
        argv.append(name)
        if takes:
            argv.append(rng.choice(choices) if choices and rng.random() < 0.6 else argv_value(rng, protected))
    if verb == "run":  # the runs that do start stay short (the fuzzed flags, given after these, win)
        argv[1:1] = ["--budget", "5", "--variant-budget", "0.1", "--repeats", "2", "--no-history", "--quiet", "-w",
                 rng.choice(["gemm:tiny", "membw:tiny"])]
    if verb == "coverage":  # a whole audit takes minutes: a few operators, as a user's first try would
        argv[1:1] = ["--ops", "^abs$", "--budget", "10", "--max-samples", "2"]
    return argv


def fuzz_argv(n: int, rng: random.Random, tally: Tally, work: Path) -> None:
    specs = verb_flags()
    verbs = [v for v in specs for _ in range(CHEAP_WEIGHT.get(v, 6))]
    protected = Protected(work)
    here = os.getcwd()
    os.chdir(work)
    t0 = time.monotonic()
    try:
        for i in range(n):
            verb = rng.choice(verbs)
            argv = make_argv(verb, specs[verb], rng, protected)
            label = " ".join(a[:40] for a in argv)[:300]
            rc, out, err = call_inproc(argv)
            tally.judge(verb, rc, out, err, label, False, "")
            protected.check(argv, tally, label)
            if (i + 1) % 500 == 0:
                print(f"{i + 1} command lines, {time.monotonic() - t0:.0f} s: {dict(headline(tally))}",
                      file=sys.stderr)
    finally:
        os.chdir(here)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000, help="mutated event streams, in process")
    ap.add_argument("--event-runs", type=int, default=30, help="hostile event lines in real runs")
    ap.add_argument("--workload-files", type=int, default=120, help="hostile workload files in real runs")
    ap.add_argument("--argv", type=int, default=10_000, help="hostile command lines, in process")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="write the summary (JSON) here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    parts = {"event streams": Tally(), "event lines in runs": Tally(), "workload files": Tally(),
             "command lines": Tally()}
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="gapbench-fuzz-runs-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        os.environ["GAPBENCH_DB"] = str(Path(tmp) / "default-history.sqlite")
        t = time.monotonic()
        fuzz_events(args.events, rng, parts["event streams"])
        seconds["event streams"] = round(time.monotonic() - t)
        t = time.monotonic()
        fuzz_real_runs(args.event_runs, args.workload_files, rng, parts["event lines in runs"],
                       parts["workload files"], Path(tmp))
        seconds["real runs"] = round(time.monotonic() - t)
        t = time.monotonic()
        fuzz_argv(args.argv, rng, parts["command lines"], work)
        seconds["command lines"] = round(time.monotonic() - t)
    summary = {"command": " ".join(["python", "benchmarks/fuzz_runs.py", *sys.argv[1:]]), "seed": args.seed,
               "seconds": seconds, "per_call_limit_s": CALL_LIMIT_S, "per_run_limit_s": RUN_LIMIT_S,
               **{name: {**headline(t), "exits": exits(t), "examples": t.examples} for name, t in parts.items()}}
    summary["cases"] = sum(t.c["calls"] for t in parts.values())
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if any(summary[name][k] for name in parts for k in FINDINGS) else 0


if __name__ == "__main__":
    sys.exit(main())
