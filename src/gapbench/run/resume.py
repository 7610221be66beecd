"""Resuming an interrupted run: what its journal (or its partial results file) says was planned and finished,
checked before anything runs again."""

from __future__ import annotations

import os
from pathlib import Path

from gapbench import __version__, workloads
from gapbench.engine.journal import Journal, journal_path
from gapbench.errors import GapbenchError, ResultFileError
from gapbench.record import SchemaError
from gapbench.results import SCHEMA_VERSION, Measurement, ResultSet, load
from gapbench.run.plan import RunPlan


def read_journal(output: str) -> tuple[dict, RunPlan, dict[tuple[int, str], Measurement]]:
    """The header, the plan and the finished measurements, by (pass, variant key), of an interrupted run (its
    journal, else its partial file); a journal or file that cannot be resumed is a GapbenchError naming what is
    wrong."""
    journal = Journal(journal_path(output))
    done: dict[tuple[int, str], Measurement] = {}
    if journal.exists():
        contents = journal.read(is_header=lambda o: o.get("event") == "header", what="run journal")
        header = contents.header
        if header is None or not isinstance(header.get("plan"), dict):
            raise GapbenchError(f"cannot resume {output} (--resume): its journal {journal.path} has no run plan")
        for ev in contents.entries:
            if ev.get("event") == "device" and isinstance(ev.get("identity"), dict):
                header["device"] = ev["identity"]
            elif ev.get("event") == "measurement":
                try:
                    m = Measurement.read(ev["measurement"])
                    p = int(ev.get("pass") or 0)
                except (ValueError, KeyError, TypeError):
                    continue  # an entry that does not read is measured again
                done[(p, m.key)] = m
    elif not os.path.exists(output):
        raise GapbenchError(f"cannot resume {output} (--resume): neither it nor its journal {journal.path} exists")
    else:
        try:
            rs = load(output)
        except ResultFileError as e:
            raise GapbenchError(f"--resume {e}") from None
        workloads_ = rs.options.get("workloads")
        if not isinstance(workloads_, list) or "device" not in rs.options:
            raise GapbenchError(f"cannot resume {output} (--resume): it does not record its run plan")
        if rs.options.get("runs") not in (None, 1):
            raise GapbenchError(f"cannot resume {output} (--resume) without its journal: its {rs.options['runs']} runs are "
                                "merged in the file")
        plan = dict(rs.options)
        plan["entries"] = [list(workloads.parse_spec(s)) if isinstance(s, str) else s for s in workloads_]
        header = {"event": "header", "run_id": rs.run_id, "started_at": rs.started_at, "plan": plan,
                  "host": rs.host, "device": rs.device, "gapbench_version": rs.gapbench_version}
        for m in rs.measurements:
            done.setdefault((0, m.key), m)
    return header, _checked_plan(header, output), done


def _checked_plan(header: dict, output: str) -> RunPlan:
    """The plan a resumed run is built from; its run id, host and device must make a valid results file."""
    try:
        plan = RunPlan.read(header["plan"])
    except SchemaError as e:
        raise GapbenchError(f"cannot resume {output} (--resume): its run plan is damaged: plan.{e}") from None
    head = {"schema_version": SCHEMA_VERSION, "run_id": header.get("run_id"), "started_at": header.get("started_at"),
            "host": header.get("host") or {}, "device": header.get("device") or {}, "measurements": []}
    try:
        ResultSet.read(head)
    except SchemaError as e:
        raise GapbenchError(f"cannot resume {output} (--resume): its journal header is damaged: {e}") from None
    return plan


HOST_FACTS = ("hostname", "machine", "cpu", "cpu_count")  # what makes two hosts' measurements not one run's
DEVICE_FACTS = ("type", "product", "arch", "count")


def resumed_files(plan: RunPlan, given: list[str], output: str) -> list[str]:
    """The workload files a resumed run imports: those the user names again (--workload-file), never the paths a
    journal or a partial file holds (data, which anyone may have edited); they must be the files the run used."""
    recorded = sorted(str(Path(f).resolve()) for f in plan.workload_files)
    named = [str(Path(f).resolve()) for f in given]
    if sorted(named) == recorded:
        return named
    if not named:
        raise GapbenchError(f"cannot resume {output} (--resume): the run used workload file(s) "
                            f"{', '.join(plan.workload_files)}; code is never imported on a file's say-so: name "
                            "them again with --workload-file")
    if not recorded:
        raise GapbenchError(f"--workload-file {', '.join(given)}: the run in {output} used no workload file; resume "
                            "it without --workload-file")
    raise GapbenchError(f"--workload-file {', '.join(given)}: the run in {output} used {', '.join(recorded)}; "
                        "name the same file(s) to resume it")


def foreign_facts(header: dict, host: dict, device: dict | None) -> list[str]:
    """What differs between the machine and gapbench that began an interrupted run and these, each as
    'what: there -> here' (none: the same machine and version)."""
    there_host = header.get("host") if isinstance(header.get("host"), dict) else {}
    diffs = [f"host {k}: {there_host.get(k)!r} -> {host.get(k)!r}" for k in HOST_FACTS
             if there_host.get(k) != host.get(k)]
    there_dev = header.get("device")
    if isinstance(there_dev, dict) and there_dev and device is not None:  # a run stopped before any device event has none
        diffs += [f"device {k}: {there_dev.get(k)!r} -> {device.get(k)!r}" for k in DEVICE_FACTS
                  if there_dev.get(k) != device.get(k)]
    if header.get("gapbench_version") != __version__:
        diffs.append(f"gapbench {header.get('gapbench_version') or 'version not recorded'} -> {__version__}")
    return diffs


def check_same_machine(header: dict, host: dict, device: dict | None, output: str, force: bool) -> str | None:
    """GapbenchError unless the interrupted run began on this host and device with this gapbench; with `force`,
    the warning line to print instead."""
    diffs = foreign_facts(header, host, device)
    if not diffs:
        return None
    what = "; ".join(diffs)
    if not force:
        raise GapbenchError(f"cannot resume {output} (--resume): it was begun elsewhere ({what}); one results file "
                            "holds one machine's measurements: run again here, or add --force to mix them")
    return (f"gapbench: warning: --force: completing {output} here though it was begun elsewhere ({what}); the "
            "file will hold measurements of both")
