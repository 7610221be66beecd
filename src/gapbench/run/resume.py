"""Resuming an interrupted run: what its journal (or its partial results file) says was planned and finished,
checked before anything runs again."""

from __future__ import annotations

import os

from gapbench import workloads
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
                  "host": rs.host, "device": rs.device}
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
