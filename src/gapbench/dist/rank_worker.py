"""Inside each rank of a distributed run: join the process group, run one workload's variants in
lockstep with the other ranks, and (rank 0) report events to the runner.

Started by the runner through PyTorch's elastic launcher (`--nproc N`), or, under an external torchrun,
once per rank by that rank's runner. It speaks the same events as gapbench.worker (hello, variants,
start, result, done), as JSON lines appended to a file, because the launcher does not pass inherited
file descriptors on to its children. Environment:

  GAPBENCH_JOB_FILE           the job (JSON, as gapbench.worker reads it on stdin)
  GAPBENCH_EVENTS_PATH        where the events go; only rank 0 writes unless GAPBENCH_EVENTS_EVERY_RANK=1
  GAPBENCH_DIST_DIR           folder for rank status files (pid, host, variant, heartbeat) and stack dumps
  GAPBENCH_STORE_PREFIX       build the group on this fresh prefix of the TCPStore at MASTER_ADDR:MASTER_PORT
                              (joining an external torchrun job anew for each workload)

What a workload is decides how its variants run: a distributed workload (collectives) or a training
workload with options["parallel"] runs on every rank at once; any other workload (gemm, membw) runs on
every rank's own device, and rank 0 reports each device and their spread (stragglers).
"""

from __future__ import annotations

import faulthandler
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
import traceback
from dataclasses import replace
from datetime import timedelta

STATUS_EVERY_S = 1.0


class Status:
    """rank<r>.json in the run folder: who this rank is and what it is doing, refreshed every second."""

    def __init__(self, folder: str | None, rank: int, local_rank: int):
        self.path = os.path.join(folder, f"rank{rank}.json") if folder else None
        self.data = {"rank": rank, "local_rank": local_rank, "pid": os.getpid(), "host": platform.node(),
                     "phase": "starting", "variant": None, "done": 0,
                     "thread": f"0x{threading.get_ident():016x}"}  # how faulthandler names the main thread
        self._stop = threading.Event()
        if self.path:
            self.write()
            threading.Thread(target=self._beat, daemon=True).start()

    def set(self, **kw) -> None:
        self.data.update(kw)
        self.write()

    def write(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(self.data | {"t": time.time()}, f)
            os.replace(tmp, self.path)
        except OSError:
            pass

    def _beat(self) -> None:
        while not self._stop.wait(STATUS_EVERY_S):
            self.write()


class FileEvents:
    """Events as JSON lines appended to a file (None path: events are dropped)."""

    def __init__(self, path: str | None):
        self.f = open(path, "a", encoding="utf-8") if path else None

    def send(self, kind: str, **data) -> None:
        if self.f is None:
            return
        self.f.write(json.dumps({"event": kind, **data}, allow_nan=False) + "\n")
        self.f.flush()


def init_group(backend: str, timeout_s: float, device) -> None:
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    prefix = os.environ.get("GAPBENCH_STORE_PREFIX")
    if prefix:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=timeout)
        dist.init_process_group(backend, store=dist.PrefixStore(prefix, store), rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout)


def run(job: dict, events: FileEvents, status: Status) -> None:
    import torch
    import torch.distributed as dist

    from gapbench import devices, workloads
    from gapbench.dist import info
    from gapbench.dist.control import Control, set_control
    from gapbench.results import Measurement, variant_key
    from gapbench.worker import _is_oom
    from gapbench.workloads.base import Context, Variant

    kind = devices.resolve(job["device"]).type
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = devices.Device(kind, 0 if kind in ("cpu", "mps") else local_rank)
    if not device.is_cpu and local_rank >= device.count:
        raise RuntimeError(f"local rank {local_rank} has no {kind} device: only {device.count} visible")
    device.set_current()
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    backend = job.get("backend") or info.backend_for(kind)
    timeout_s = float(job.get("dist_timeout_s") or 600)
    status.set(phase="init_process_group")
    init_group(backend, timeout_s, device)
    ctl = Control(timeout_s)
    set_control(ctl)
    me = info.from_env(backend, job.get("launcher") or "torchrun")
    rank, n = me.rank, me.world_size
    ident = device.identity()
    peers = ctl.all_gather({"rank": rank, "host": platform.node(), "device": str(device),
                            "product": ident.get("product")})
    hosts = sorted({p["host"] for p in peers})
    me = replace(me, node_count=len(hosts))
    ident["distributed"] = {
        "world_size": n, "nodes": len(hosts), "ranks_per_node": me.local_world_size, "backend": backend,
        "launcher": me.launcher, "hosts": hosts, "ranks": peers,
        "interconnect": info.interconnect(kind) if rank == 0 else None,
        "torch_distributed": {"nccl": ident.get("libraries", {}).get("nccl") or ident.get("libraries", {}).get("rccl"),
                              "gloo": dist.is_gloo_available()}}
    events.send("hello", pid=os.getpid(), device=ident)

    extra = {}
    for path in job.get("workload_files") or []:
        extra.update(workloads.load_file(path))
    w = workloads.get(job["workload"], extra)
    preset = job.get("preset") or w.default_preset
    options = dict(job.get("options") or {})
    parallel = options.get("parallel") if not w.distributed else None
    lockstep = w.distributed or bool(parallel)
    base = Context(device=device, preset=preset, budget_s=job.get("variant_budget_s") or 60.0,
                   min_time_s=job.get("min_time_s") or 0.1, repeats=job.get("repeats") or 7, options=options,
                   dist=me)
    status.set(phase="variants")
    chosen: list | str = []
    if rank == 0:
        try:
            chosen = w.variants(preset, base)
        except Exception as e:  # noqa: BLE001 - told to every rank, reported once
            chosen = f"{e.__class__.__name__}: {e}"
    chosen = ctl.broadcast(chosen)
    if isinstance(chosen, str):
        raise RuntimeError(chosen)
    if parallel:
        chosen = [Variant(v.params | {"parallel": parallel, "world_size": n}, v.flops, v.bytes) for v in chosen]
    skip = set(job.get("skip") or [])
    todo = [v for v in chosen if variant_key(w.name, preset, v.params) not in skip]
    events.send("variants", total=len(chosen), todo=len(todo),
                keys=[variant_key(w.name, preset, v.params) for v in todo],
                variants=[v.params for v in todo], unit=w.unit, higher_is_better=w.higher_is_better)
    one_at_a_time = not lockstep and device.is_cpu  # CPU ranks share the host's cores: measure them in turn
    deadline = time.monotonic() + job["workload_budget_s"] if job.get("workload_budget_s") else None
    cap = job.get("variant_budget_s") or 60.0

    def measure(v: Variant, ctx: Context) -> Measurement:
        device.reset_peak_memory()
        t0, started = time.monotonic(), _now()
        try:
            m = w.run(v, ctx)
            if not isinstance(m, Measurement):
                raise TypeError(f"{w.name}.run() returned {type(m).__name__}, not a Measurement")
        except BaseException as e:  # noqa: BLE001 - a workload's failure is a finding
            if isinstance(e, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
            m = w.failed(v, ctx, "oom" if _is_oom(e) else "error", f"{e.__class__.__name__}: {e}{where}")
            status.set(phase=f"variant raised {e.__class__.__name__}; waiting for the other ranks")
            device.empty_cache()
        if m.peak_memory_bytes is None:
            m = replace(m, peak_memory_bytes=device.peak_memory())
        return replace(m, duration_s=time.monotonic() - t0, started_at=started, preset=preset)

    for i, v in enumerate(todo):
        budget = cap
        if deadline is not None:
            budget = min(cap, max(deadline - time.monotonic(), 0.0) / (len(todo) - i))
        budget = ctl.broadcast(max(budget, 0.5))
        key = variant_key(w.name, preset, v.params)
        events.send("start", key=key, variant=v.params, budget_s=budget * (n if one_at_a_time else 1))
        status.set(phase="variant", variant=key)
        ctx = Context(device=device, preset=preset, budget_s=budget, min_time_s=base.min_time_s,
                      repeats=base.repeats, options=options, dist=me)
        if lockstep:
            m = measure(v, ctx)
            verdicts = ctl.all_gather((m.status, m.reason))
            bad = [(r, s, why) for r, (s, why) in enumerate(verdicts) if s != "ok"]
            if bad and m.ok:
                r, s, why = bad[0]
                m = w.failed(v, ctx, s, f"rank {r}: {why}")
            elif bad and rank == 0:
                m = replace(m, reason=f"rank {bad[0][0]}: {bad[0][2]}"[:300])
            rows = [m]
            if parallel and options.get("scaling_baseline", True) and n > 1:
                rows = _with_baseline(m, v, w, ctx, measure, ctl, parallel) if rank == 0 else rows
                if rank != 0:
                    status.set(phase="waiting for rank 0's single-device baseline")
                ctl.barrier()
        else:
            if one_at_a_time:
                m = None
                for r in range(n):
                    ctl.barrier()
                    if r == rank:
                        m = measure(v, ctx)
                ctl.barrier()
            else:
                ctl.barrier()
                m = measure(v, ctx)
            gathered = ctl.all_gather((m.to_dict(), str(device), ident.get("product"), platform.node()))
            rows = _straggler_rows(v, [(Measurement.from_dict(d), dv, prod, host) for d, dv, prod, host in gathered],
                                   one_at_a_time, w.higher_is_better)
        for row in rows:
            events.send("result", key=variant_key(w.name, preset, row.variant) if row is not rows[-1] else key,
                        measurement=row.to_dict())
        status.set(phase="between variants", variant=None, done=status.data["done"] + 1)
    status.set(phase="done")
    ctl.barrier()
    events.send("done")
    dist.destroy_process_group()


def _with_baseline(m, v, w, ctx, measure, ctl, parallel: str) -> list:
    """Rank 0 alone measures the same variant on its one device; the parallel row gets the scaling efficiency."""
    from gapbench.dist.training import scaling_efficiency
    from gapbench.workloads.base import Context, Variant

    plain = {k: x for k, x in v.params.items() if k not in ("parallel", "world_size")}
    options = {k: x for k, x in ctx.options.items() if k != "parallel"}
    single_ctx = Context(device=ctx.device, preset=ctx.preset, budget_s=ctx.budget_s, min_time_s=ctx.min_time_s,
                         repeats=ctx.repeats, options=options, dist=None)
    single = measure(Variant(plain, v.flops, v.bytes), single_ctx)
    single = replace(single, variant=plain, metrics=single.metrics | {
        "scaling_baseline_for": f"--parallel {parallel} on {ctx.dist.world_size} ranks"})
    if m.ok and single.ok:
        eff = scaling_efficiency(m.value, ctx.dist.world_size, single.value)
        m = replace(m, metrics=m.metrics | {"single_device_throughput": single.value, "scaling_efficiency": eff})
    return [single, m]


def _straggler_rows(v, per_rank: list, one_at_a_time: bool, higher_is_better: bool) -> list:
    """One row per rank (params + rank) and the headline row: the median device, with the spread."""
    rows = []
    for r, (m, dev, prod, host) in enumerate(per_rank):
        rows.append(replace(m, variant=v.params | {"rank": r}, metrics=m.metrics | {
            "device": dev, "host": host, "product": prod}))
    ok = [(r, m.value) for r, (m, *_rest) in enumerate(per_rank) if m.ok]
    failed = [(r, m) for r, (m, *_rest) in enumerate(per_rank) if not m.ok]
    if failed:
        r, m = failed[0]
        rows.append(replace(m, variant=v.params, reason=f"rank {r} ({per_rank[r][1]}): {m.reason}"[:300]))
        return rows
    values = [x for _r, x in ok]
    median_rank = sorted(ok, key=lambda t: t[1])[(len(ok) - 1) // 2][0]
    slow = min(ok, key=lambda t: t[1]) if higher_is_better else max(ok, key=lambda t: t[1])
    lo, hi = min(values), max(values)
    head = per_rank[median_rank][0]
    cpu = per_rank[0][1] == "cpu"
    spread = {
        "devices": len(values), "values": values, "min": lo, "median": statistics.median(values), "max": hi,
        "max_over_min": hi / lo if lo > 0 else None, "slowest_rank": slow[0],
        "slowest_device": f"{per_rank[slow[0]][3]} {per_rank[slow[0]][1]} ({per_rank[slow[0]][2]})",
        "headline": f"the median device (rank {median_rank})",
        "schedule": "one rank at a time" if one_at_a_time else "all devices at once",
    }
    if cpu:
        spread["note"] = "on the CPU the 'devices' are the ranks: processes sharing this host's cores"
    rows.append(replace(head, variant=v.params, metrics=head.metrics | {"spread": spread}))
    return rows


def _now() -> str:
    from gapbench.results import now_iso

    return now_iso()


def main() -> int:
    rank = int(os.environ.get("RANK", 0))
    folder = os.environ.get("GAPBENCH_DIST_DIR")
    status = Status(folder, rank, int(os.environ.get("LOCAL_RANK", 0)))
    if folder:
        stack = open(os.path.join(folder, f"rank{rank}.stack"), "w")  # noqa: SIM115 - open for the process's life
        faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    every = os.environ.get("GAPBENCH_EVENTS_EVERY_RANK") == "1"
    events = FileEvents(os.environ.get("GAPBENCH_EVENTS_PATH") if every or rank == 0 else None)
    with open(os.environ["GAPBENCH_JOB_FILE"], encoding="utf-8") as f:
        job = json.load(f)
    from gapbench.worker import _limit_memory

    _limit_memory(job.get("memory_limit_bytes"))
    try:
        run(job, events, status)
    except Exception as e:  # setup failed, or a rank lost its peers
        from gapbench.errors import GapbenchError

        status.set(phase=f"failed: {e.__class__.__name__}: {e}"[:240], failed_at=time.time())
        kind = "bad_input" if isinstance(e, GapbenchError) else "setup_error"
        events.send(kind, reason=f"rank {rank}: {e.__class__.__name__}: {e}" if kind == "setup_error" else str(e),
                    traceback=traceback.format_exc(limit=-3))
        print(f"gapbench rank {rank}: {e.__class__.__name__}: {e}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
