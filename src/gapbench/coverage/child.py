"""A coverage child process: import the OpInfo database, then list ops, index them, or audit (op, dtype)
units, one event each on the engine's channel.

Run as `python -m gapbench.coverage.child` with its configuration (JSON) on stdin. Importing the OpInfo database changes global
torch flags, which is why it only ever happens in a child, never in the gapbench process itself.

Events:
  hello {torch, pid}
  start {unit}            before each (op, dtype) unit: the parent's per-op timeout starts here
  row {unit, row}         the unit's verdict
  op {...} / index {...}  in the list / index modes
  end
An op's own prints go to the child's stdout and stderr, which the parent keeps for crash reasons.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

from gapbench.engine.channel import EventWriter
from gapbench.engine.lifeline import tie_to_parent


def audit_units(cfg: dict, ops: list, events: EventWriter) -> None:
    import torch

    from gapbench import devices
    from gapbench.coverage.op_audit import OpAuditor, one_line
    from gapbench.coverage.opinfo import unit_key

    device = devices.resolve(cfg["device"])
    device.set_current()
    by_key = {(o.name, o.variant_test_name): o for o in ops}
    auditor = OpAuditor(device, int(cfg.get("max_samples") or 0), float(cfg.get("time_target_s", 0.02)))
    for name, variant, dtype_name in cfg["units"]:
        key = unit_key(name, variant, dtype_name)
        events.send("start", unit=key)
        t0 = time.monotonic()
        op = by_key.get((name, variant))
        if op is None:
            row = {"op": name, "variant": variant, "dtype": dtype_name, "status": "error",
                   "reason": "no such OpInfo entry in this torch"}
        else:
            try:
                row = auditor.audit(op, getattr(torch, dtype_name), bool(cfg.get("grad")))
            except Exception as e:  # a bug of ours or a sample: record it, keep going
                row = {"op": name, "variant": variant, "dtype": dtype_name, "status": "error",
                       "reason": one_line(f"audit failed: {e.__class__.__name__}: {e} "
                                          f"[{traceback.extract_tb(e.__traceback__)[-1].name}]")}
        row["wall_s"] = round(time.monotonic() - t0, 3)
        events.send("row", unit=key, row=row)
        gc.collect()


def main(argv: list[str]) -> int:
    tie_to_parent()
    import torch

    from gapbench.coverage.classify import family_of
    from gapbench.coverage.opinfo import index_entry, load_ops, select_ops

    events = EventWriter()
    cfg = json.loads(Path(argv[0]).read_text() if argv else sys.stdin.read())
    warnings.simplefilter("ignore")
    events.send("hello", torch=torch.__version__, pid=os.getpid())
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    ops = select_ops(load_ops(cfg.get("extra_ops")), cfg.get("ops"))
    gc.collect()
    gc.freeze()  # the OpInfo database is millions of objects: keep them out of every later collection
    mode = cfg["mode"]
    if mode == "list":
        for o in ops:
            events.send("op", op=o.name, variant=o.variant_test_name, family=family_of(o.name, type(o).__name__),
                        autograd=bool(o.supports_autograd))
    elif mode == "index":
        for o in ops:
            events.send("index", **index_entry(o))
    elif mode == "audit":
        audit_units(cfg, ops, events)
    events.send("end")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
