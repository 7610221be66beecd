"""The accelerator check's core (benchmarks/device_check.sh runs it): every part of gapbench that needs a GPU, in
one command, into at most eight files.

    python benchmarks/device_check.py --out DIR [--device cuda] [--label NAME] [--plan TABLE] [--dry-run]

- a preflight imports every gapbench module and checks every requirement of the package (and of each part's
  extras) against what is installed; it stops in seconds naming what is missing, before any part starts;
- the parts run in the order of the time plan (the one table of it is in device_check.sh: part and seconds, most
  valuable first), each in its own process group, each given a gapbench --budget inside its limit; at the limit a part
  gets SIGINT first (gapbench writes its partial results file), then SIGTERM, then SIGKILL;
- after every part the output folder is rewritten: summary.txt (each part ok / partial / failed / skipped and
  why, its time against its plan, its rows), env.json, compare.md, report.html and device-check.tar.gz (every
  results file, journal, log and the history database) — a check cut short still leaves what it measured;
- --dry-run: the same parts with the tiny presets on the test accelerator and the plan scaled by --scale (the
  test suite runs it so), to show the script works end to end before a quarter hour of device time is spent.

Work files live in a scratch folder (--work, default a new temporary folder), never in the output folder: only
the eight files above come back from a lent machine.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata as md
import json
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_wheels import gapbench_requirements  # noqa: E402  (beside this file)

ROOT = Path(__file__).resolve().parents[1]
MAX_TOTAL_S = 480  # the plan's sum: eight minutes of one ten-minute command, the rest for start-up and a rerun
MAX_FILE_BYTES = 15 * 2**20  # each file brought back stays under 16 MiB
OUTPUT_FILES = ("summary.txt", "env.json", "compare.md", "report.html", "device-check.tar.gz")
REFS = ("h100-sxm", "h200", "mi300x")


@dataclass
class Part:
    """One step of the check: a gapbench command, its results file (if any), the extras it needs."""

    name: str
    argv: list[str]
    results: str | None = None  # file name in the work folder
    needs: tuple[str, ...] = ()  # distributions the part cannot run without
    stdout: str | None = None  # where its standard output goes (a file in the work folder), else its log
    budget_flag: str | None = "--budget"  # how the part is given its own budget (None: it takes none)
    seconds: float = 0.0  # from the plan
    how: str = "not run"
    why: str = ""
    took: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)


DRY_RUN = ["--min-time", "0.01", "--repeats", "3", "--variant-budget", "2"]  # every part of a dry run


def parts(device: str, label: str, dry: bool) -> dict[str, Part]:
    """Every part the plan may name, with its command on the real device (dry: the tiny presets, with `dry`
    options where the full ones would not fit a tiny preset)."""
    def run(name: str, *workloads: str, extra=(), dry_extra=(), needs=()):
        w = []
        for entry in workloads:
            w += ["-w", (entry.split(":")[0] + ":tiny") if dry else entry]
        opts = [*dry_extra, *DRY_RUN] if dry else list(extra)
        return Part(name, ["run", "--device", device, *w, *opts, "--label", label, "-q", "--no-history", "-o",
                           f"{name}.json"], f"{name}.json", needs)

    return {
        # the max-achievable sweeps a reader sets beside published GEMM measurements, first
        "gemm-sweep": run("gemm-sweep", "gemm:sweep", extra=["--dtype", "bf16,fp8"], dry_extra=["--dtype", "bf16,fp8"]),
        # ~60 rows in its minute: short repeats (the sweep's rows carry the full ones), fp8 and int8 come last
        "gemm": run("gemm", "gemm:shapes", extra=["--dtype", "fp32,tf32,bf16,fp16,fp8,int8", "--variant-budget", "1",
                                                  "--min-time", "0.05", "--repeats", "5"],
                    dry_extra=["--dtype", "fp32,tf32,fp8,int8"]),
        "membw": run("membw", "membw:standard", extra=["--variant-budget", "3"]),
        "micro": run("micro", "attention", "conv", extra=["--dtype", "fp32,tf32,bf16", "--variant-budget", "0.5",
                                                           "--min-time", "0.02", "--repeats", "3"],
                     dry_extra=["--dtype", "fp32,tf32"]),
        "models": run("models", "llm-train:llama2-70b-slice", "bert-finetune:bert-large-128",
                      extra=["--variant-budget", "35"], needs=("transformers",)),
        "sdxl": run("sdxl", "diffusion-infer:sdxl", extra=["--variant-budget", "35"], dry_extra=["--steps", "1"],
                    needs=("transformers", "diffusers")),
        "llm-infer": run("llm-infer", "llm-infer:llama3-8b",
                         extra=["--dtype", "bf16", "--input-len", "1024", "--output-len", "128", "--batch-size",
                                "1,8,64", "--variant-budget", "50"],
                         dry_extra=["--dtype", "fp32", "--batch-size", "1,4", "--input-len", "32", "--output-len", "8"],
                         needs=("transformers",)),
        "libs": run("libs", "gemm-libs:one", extra=["--dtype", "bf16", "--variant-budget", "3"]),
        "coverage": Part("coverage", ["coverage", "--device", device, "--dtype", "float32" if dry else "bfloat16",
                                      *(["--ops", "^(add|mul|matmul|nn.functional.relu)$"] if dry else []),
                                      "--max-samples", "2", "--op-timeout", "5" if dry else "20", "--label", label,
                                      "-q", "-o", "coverage.json"], "coverage.json", ("expecttest",)),
        "env": Part("env", ["env", "--device", device, "--json"], stdout="env.json", budget_flag=None),
        "compare": Part("compare", ["compare"], stdout="compare.md", budget_flag=None),
        "report": Part("report", ["report"], results=None, budget_flag=None),
    }


def read_plan(text: str) -> list[tuple[str, float]]:
    """The time plan: one 'part seconds' pair a line ('#' starts a comment)."""
    plan = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, secs = line.partition(" ")
        try:
            seconds = float(secs)
        except ValueError:
            seconds = float("nan")
        if not seconds > 0 or seconds == float("inf"):
            raise ValueError(f"the plan's line {line!r}: give a part and its seconds (a positive number)")
        plan.append((name, seconds))
    return plan


# ---- preflight ------------------------------------------------------------------------------------------

def unmet(reqs: list[str]) -> list[str]:
    """Each requirement this interpreter does not meet, said as 'name (why)'."""
    from packaging.requirements import Requirement

    out = []
    for text in reqs:
        r = Requirement(text)
        if r.marker is not None and not r.marker.evaluate():
            continue
        try:
            have = md.version(r.name)
        except md.PackageNotFoundError:
            out.append(f"{r.name} (not installed; wanted {r.specifier or 'any version'})")
            continue
        if r.specifier and not r.specifier.contains(have, prereleases=True):
            out.append(f"{r.name} (has {have}, wanted {r.specifier})")
    return out


OPTIONAL_MODULES = {"triton"}  # a module whose absence only turns its rows into 'unsupported'


def preflight(selected: list[Part]) -> tuple[list[str], dict[str, str]]:
    """(what stops the check, why each part that cannot run is skipped): every gapbench module imported, the
    package's requirements checked, each part's extras checked."""
    stop = [f"requirement {u}" for u in unmet(gapbench_requirements(extras=()))]
    import gapbench

    for m in pkgutil.walk_packages(gapbench.__path__, "gapbench."):
        if m.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(m.name)
        except ImportError as e:
            if (e.name or "").split(".")[0] not in OPTIONAL_MODULES:
                stop.append(f"module {m.name} does not import: {e}")
    skipped = {}
    for p in selected:
        missing = [n for n in p.needs if _absent(n)]
        if missing:
            skipped[p.name] = f"{', '.join(missing)} not installed"
    return stop, skipped


def _absent(dist: str) -> bool:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        return True
    return False


# ---- running a part -------------------------------------------------------------------------------------

def budget_for(limit: float) -> float:
    """The gapbench --budget a part gets inside its limit: its own grace (a tenth, at least 5 s) and about 10 s of
    start-up and writing fit before the limit."""
    return max(min(limit - 15.0, (limit - 10.0) / 1.1), 1.0)


def run_part(p: Part, limit: float, work: Path, env: dict) -> None:
    """Run one part to its end or its limit (SIGINT, then SIGTERM, then SIGKILL) and say how it ended."""
    argv = [sys.executable, "-m", "gapbench", *p.argv]
    if p.budget_flag:
        argv += [p.budget_flag, f"{budget_for(limit):.0f}"]
    log = open(work / f"{p.name}.log", "wb")
    out = open(work / p.stdout, "wb") if p.stdout else log
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    stopped = None
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGINT, max(10.0, 0.15 * limit)), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            stopped = stopped or signal.Signals(sig).name
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                stopped = signal.Signals(sig).name
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing of the part outlives it
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        if out is not log:
            out.close()
    p.took = time.monotonic() - t0
    judge(p, proc.returncode, stopped, work)


def judge(p: Part, rc: int, stopped: str | None, work: Path) -> None:
    """ok / partial / failed, and why: from the exit status, the results file and the log's error line."""
    rows = _rows(work / p.results) if p.results else None
    if rows is not None:
        p.rows = rows
    if stopped:
        p.why = f"stopped at its limit ({stopped} first)"
    if rc == 0 and not stopped and (p.results is None or (rows is not None and rows.get("complete"))):
        p.how = "ok"
    elif rows and sum(v for k, v in rows.items() if k != "complete"):
        p.how = "partial"
        p.why = p.why or f"exit {rc}"
    else:
        p.how = "failed"
        p.why = "; ".join(x for x in (p.why, f"exit {rc}", _error_line(work / f"{p.name}.log")) if x)


def _rows(path: Path) -> dict[str, int] | None:
    """Rows of a results (or coverage) file by status, and whether it is complete; None when there is none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    counts: dict[str, int] = {}
    for m in data.get("measurements") or []:
        counts[m.get("status", "?")] = counts.get(m.get("status", "?"), 0) + 1
    cov = data.get("coverage") or {}
    if cov and not counts:
        for r in cov.get("ops") or cov.get("results") or []:
            s = r.get("status", "?") if isinstance(r, dict) else "?"
            counts[s] = counts.get(s, 0) + 1
    counts["complete"] = int(bool(data.get("complete", True)))
    return counts


def _error_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for line in reversed(lines):
        if "error" in line.lower() or "Traceback" in line:
            return line.strip()[:300]
    return (lines[-1].strip()[:300]) if lines else "no output"


# ---- the output folder ----------------------------------------------------------------------------------

def summary(selected: list[Part], started: float, stop: list[str], device: str, dry: bool) -> str:
    planned = sum(p.seconds for p in selected)
    lines = [f"gapbench device check on {device}{' (dry run: tiny presets)' if dry else ''}",
             f"planned {planned:.0f} s; {time.monotonic() - started:.0f} s so far", ""]
    if stop:
        lines += ["preflight stopped the check before any part ran:"] + [f"  {s}" for s in stop] + [""]
    lines.append(f"{'part':<11} {'how':<8} {'took':>6} {'plan':>6}  rows / why")
    for p in selected:
        rows = ", ".join(f"{v} {k}" for k, v in p.rows.items() if k != "complete")
        detail = "; ".join(x for x in (rows, p.why) if x)
        lines.append(f"{p.name:<11} {p.how:<8} {p.took:>5.0f}s {p.seconds:>5.0f}s  {detail}")
    return "\n".join(lines) + "\n"


def write_out(out: Path, work: Path, text: str) -> None:
    """summary.txt, the loose files and the archive of everything, each replaced whole (a kill mid-way keeps the
    last good copy)."""
    _replace(out / "summary.txt", text.encode())
    for name, src in (("env.json", "env.json"), ("compare.md", "compare.md"), ("report.html", "report.html")):
        f = work / src
        if f.is_file() and f.stat().st_size and f.stat().st_size < MAX_FILE_BYTES:
            _replace(out / name, f.read_bytes())
    (work / "summary.txt").write_text(text)
    tmp = out / ".device-check.tar.gz.part"
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(work.iterdir()):
            if f.is_file():
                tar.add(f, arcname=f"device-check/{f.name}")
    if tmp.stat().st_size > MAX_FILE_BYTES:  # logs are what grows: keep their ends
        for f in work.glob("*.log"):
            data = f.read_bytes()
            if len(data) > 2**20:
                f.write_bytes(b"[... cut ...]\n" + data[-2**20:])
        with tarfile.open(tmp, "w:gz") as tar:
            for f in sorted(work.iterdir()):
                if f.is_file():
                    tar.add(f, arcname=f"device-check/{f.name}")
    os.replace(tmp, out / "device-check.tar.gz")


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (absolute or relative; made if missing)")
    ap.add_argument("--device", default=None, help="device (default cuda; test with --dry-run)")
    ap.add_argument("--label", default=None, help="platform name in the results (default: the device)")
    ap.add_argument("--plan", required=True, help="the time plan: lines of 'part seconds' (device_check.sh's table)")
    ap.add_argument("--work", default=None, help="scratch folder (default: a new temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="tiny presets on the test accelerator")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every part's seconds (dry runs)")
    ap.add_argument("--only", default=None, help="comma list: run only these parts of the plan")
    args = ap.parse_args(argv)
    device = args.device or ("test" if args.dry_run else "cuda")
    label = args.label or device
    try:
        plan = read_plan(args.plan)
    except ValueError as e:
        print(f"device_check: {e}", file=sys.stderr)
        return 2
    known = parts(device, label, args.dry_run)
    bad = [n for n, _ in plan if n not in known]
    if bad:
        print(f"device_check: unknown part(s) in the plan: {', '.join(bad)}", file=sys.stderr)
        return 2
    total = sum(s for _, s in plan)
    if total > MAX_TOTAL_S and not args.dry_run:
        print(f"device_check: the plan sums to {total:.0f} s, more than {MAX_TOTAL_S} s", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else None
    selected = []
    for name, secs in plan:
        if only is None or name in only:
            p = known[name]
            p.seconds = secs
            selected.append(p)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="gapbench-device-check-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GAPBENCH_DB=str(work / "history.sqlite"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    started = time.monotonic()
    print(f"device check: {len(selected)} parts, planned {sum(p.seconds for p in selected):.0f} s; work in {work}",
          flush=True)
    stop, skipped = preflight(selected)
    if stop:
        for p in selected:
            p.how, p.why = "skipped", "preflight stopped the check"
        write_out(out, work, summary(selected, started, stop, device, args.dry_run))
        print("device check: preflight stopped it:\n  " + "\n  ".join(stop), file=sys.stderr)
        return 2
    for p in selected:
        if p.name in skipped:
            p.how, p.why = "skipped", skipped[p.name]
        elif p.name in ("compare", "report"):
            files = [q.results for q in selected if q.results and q.name != "coverage" and q.rows and
                     sum(v for k, v in q.rows.items() if k != "complete")]
            if not files:
                p.how, p.why = "skipped", "no part left a results file"
            else:
                refs = [a for r in ([] if args.dry_run else REFS) for a in ("--ref", r)]
                p.argv = (["compare", "--label", label, *files, *refs, "--format", "md", "--no-history"]
                          if p.name == "compare" else
                          ["report", "--label", label, *files, *refs, "-o", "report.html", "--no-history"])
                _run_and_say(p, work, env, args.scale, started)
        else:
            _run_and_say(p, work, env, args.scale, started)
        write_out(out, work, summary(selected, started, [], device, args.dry_run))
    text = summary(selected, started, [], device, args.dry_run)
    write_out(out, work, text)
    print(text, flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(p.how in ("ok", "skipped") for p in selected) else 1


def _run_and_say(p: Part, work: Path, env: dict, scale: float, started: float) -> None:
    limit = max(p.seconds * scale, 1.0)
    print(f"== {p.name}: started {time.monotonic() - started:.0f} s in, limit {limit:.0f} s", flush=True)
    run_part(p, limit, work, env)
    print(f"== {p.name}: {p.how} in {p.took:.0f} s {p.why}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
