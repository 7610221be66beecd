"""Inside each rank of a distributed run: join the process group, run one workload's variants in
lockstep with the other ranks, and (rank 0) report events to the runner.

Started by the runner through PyTorch's elastic launcher (`--nproc N`), or, under an external torchrun,
once per rank by that rank's runner. It speaks the single-process worker's events (hello, variants, start,
result, done) on the engine's channel, and measures each variant through the same `run_variant`.
Environment:

  GAPBENCH_JOB_FILE           the job (a WorkloadJob as JSON; the launcher passes no stdin to ranks)
  GAPBENCH_EVENTS             the engine's event channel; only rank 0 writes unless GAPBENCH_EVENTS_EVERY_RANK=1
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
from dataclasses import dataclass, replace
from datetime import timedelta

from gapbench.engine.channel import EventWriter
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.lifeline import tie_to_parent
from gapbench.engine.variant import keys_of, limit_memory, load_workload, options_of, run_variant, variant_budgets

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


@dataclass
class Group:
    """This rank in its group: device, agreement, identity, and how it measures a workload."""

    device: object
    ctl: object
    me: object
    ident: dict


def join(job: WorkloadJob, status: Status) -> Group:
    """Resolve this rank's device, join the process group and learn who the peers are."""
    import torch
    import torch.distributed as dist

    from gapbench import devices
    from gapbench.distributed import info
    from gapbench.distributed.control import Control

    backend_of = devices.resolve(job.device).backend
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = devices.Device(backend_of, backend_of.device_for_local_rank(local_rank))
    if device.index >= device.count:
        raise RuntimeError(f"local rank {local_rank} has no {device.kind} device: only {device.count} visible")
    device.set_current()
    if job.threads:
        torch.set_num_threads(int(job.threads))
    backend = job.backend or backend_of.dist_backend
    timeout_s = float(job.dist_timeout_s or 600)
    status.set(phase="init_process_group")
    init_group(backend, timeout_s, device)
    ctl = Control(timeout_s)
    me = info.from_env(backend, job.launcher or "torchrun")
    ident = device.identity()
    peers = ctl.all_gather({"rank": me.rank, "host": platform.node(), "device": str(device),
                            "product": ident.get("product")})
    hosts = sorted({p["host"] for p in peers})
    me = replace(me, node_count=len(hosts))
    libs = ident.get("libraries", {})
    ident["distributed"] = {
        "world_size": me.world_size, "nodes": len(hosts), "ranks_per_node": me.local_world_size, "backend": backend,
        "launcher": me.launcher, "hosts": hosts, "ranks": peers,
        "interconnect": info.interconnect(device) if me.rank == 0 else None,
        "torch_distributed": {"collective_library": backend_of.collective_library,
                              "version": libs.get(backend_of.collective_library),
                              "gloo": dist.is_gloo_available()}}
    return Group(device, ctl, me, ident)


def choose_variants(w, preset: str, base, g: Group) -> list:
    """Rank 0 chooses the variants (told to every rank); a failure there is every rank's failure."""
    from gapbench.workloads.base import Variant

    chosen: list | str = []
    if g.me.rank == 0:
        try:
            chosen = w.variants(preset, base)
        except Exception as e:  # noqa: BLE001 - told to every rank, reported once
            chosen = f"{e.__class__.__name__}: {e}"
    chosen = g.ctl.broadcast(chosen)
    if isinstance(chosen, str):
        raise RuntimeError(chosen)
    parallel = base.options.get("parallel") if not w.distributed else None
    if parallel:
        chosen = [Variant(v.params | {"parallel": parallel, "world_size": g.me.world_size}, v.flops, v.bytes)
                  for v in chosen]
    return chosen


def lockstep_rows(w, v, ctx, g: Group, parallel: str | None, baseline: bool) -> list:
    """Every rank measures the variant together; a rank's failure is the row's failure."""
    m = run_variant(w, v, ctx)
    verdicts = g.ctl.all_gather((m.status, m.reason))
    bad = [(r, s, why) for r, (s, why) in enumerate(verdicts) if s != "ok"]
    if bad and m.ok:
        r, s, why = bad[0]
        m = w.failed(v, ctx, s, f"rank {r}: {why}")
    elif bad and g.me.rank == 0:
        m = m.replace(reason=f"rank {bad[0][0]}: {bad[0][2]}"[:300])
    rows = [m]
    if parallel and baseline and g.me.world_size > 1:
        if g.me.rank == 0:
            rows = _with_baseline(m, v, w, ctx, parallel)
        g.ctl.barrier()
    return rows


def per_device_rows(w, v, ctx, g: Group, one_at_a_time: bool) -> list:
    """Each rank measures its own device (in turn where ranks share the host's cores); rank 0 reports every
    device and the spread."""
    from gapbench.results import Measurement

    m = None
    if one_at_a_time:
        for r in range(g.me.world_size):
            g.ctl.barrier()
            if r == g.me.rank:
                m = run_variant(w, v, ctx)
        g.ctl.barrier()
    else:
        g.ctl.barrier()
        m = run_variant(w, v, ctx)
    gathered = g.ctl.all_gather((m.model_dump(mode="json"), str(g.device), g.ident.get("product"), platform.node()))
    return _straggler_rows(v, [(Measurement.read(d), dv, prod, host) for d, dv, prod, host in gathered],
                           one_at_a_time, w.higher_is_better)


def run(job: WorkloadJob, events: EventWriter, status: Status) -> None:
    import torch.distributed as dist

    from gapbench.distributed.parallel import ParallelWrapper
    from gapbench.results import variant_key
    from gapbench.timing import LOCAL
    from gapbench.workloads.base import Context

    g = join(job, status)
    events.send("hello", pid=os.getpid(), device=g.ident)
    w, preset = load_workload(job)
    options = options_of(w, job)
    parallel = options.get("parallel") if not w.distributed else None
    wrap = ParallelWrapper(parallel, g.device, g.me) if parallel else None
    lockstep = w.distributed or bool(parallel)
    # ranks in lockstep agree on every timing decision; a rank measuring its own device decides alone
    base = Context(device=g.device, preset=preset, budget_s=job.variant_budget_s, min_time_s=job.min_time_s,
                   repeats=job.repeats, options=options, dist=g.me, agreement=g.ctl if lockstep else LOCAL,
                   wrap_model=wrap)
    status.set(phase="variants")
    chosen = choose_variants(w, preset, base, g)
    skip = set(job.skip or [])
    todo = [v for v in chosen if keys_of(w, preset, [v])[0] not in skip]
    events.send("variants", total=len(chosen), todo=len(todo), keys=keys_of(w, preset, todo),
                variants=[v.params for v in todo], unit=w.unit, higher_is_better=w.higher_is_better)
    # ranks that share the host's cores measure single-device workloads in turn
    one_at_a_time = not lockstep and g.device.host_memory_is_device_memory
    n = g.me.world_size
    deadline = time.monotonic() + job.workload_budget_s if job.workload_budget_s else None
    points = [w.point_of(v.params) for v in todo]
    for v, budget in zip(todo, variant_budgets(points, job.variant_budget_s, deadline), strict=True):
        budget = g.ctl.broadcast(budget)
        key = keys_of(w, preset, [v])[0]
        events.send("start", key=key, variant=v.params, budget_s=budget * (n if one_at_a_time else 1))
        status.set(phase="variant", variant=key)
        ctx = replace(base, budget_s=budget)
        if lockstep:
            rows = lockstep_rows(w, v, ctx, g, parallel, options.get("scaling_baseline", True))
        else:
            rows = per_device_rows(w, v, ctx, g, one_at_a_time)
        for row in rows:
            events.send("result", key=variant_key(w.name, preset, row.variant) if row is not rows[-1] else key,
                        measurement=row.model_dump(mode="json"))
        status.set(phase="between variants", variant=None, done=status.data["done"] + 1)
    status.set(phase="done")
    g.ctl.barrier()
    events.send("done")
    dist.destroy_process_group()


def _with_baseline(m, v, w, ctx, parallel: str) -> list:
    """Rank 0 alone measures the same variant on its one device; the parallel row gets the scaling efficiency."""
    from gapbench.distributed.parallel import scaling_efficiency
    from gapbench.timing import LOCAL
    from gapbench.workloads.base import Variant

    plain = {k: x for k, x in v.params.items() if k not in ("parallel", "world_size")}
    single_ctx = replace(ctx, options=ctx.options.model_copy(update={"parallel": None}), dist=None, agreement=LOCAL,
                         wrap_model=None)
    single = run_variant(w, Variant(plain, v.flops, v.bytes), single_ctx)
    single = single.replace(variant=plain, metrics=single.metrics | {
        "scaling_baseline_for": f"--parallel {parallel} on {ctx.dist.world_size} ranks"})
    if m.ok and single.ok:
        eff = scaling_efficiency(m.value, ctx.dist.world_size, single.value)
        m = m.replace(metrics=m.metrics | {"single_device_throughput": single.value, "scaling_efficiency": eff})
    return [single, m]


def _straggler_rows(v, per_rank: list, one_at_a_time: bool, higher_is_better: bool) -> list:
    """One row per rank (params + rank) and the headline row: the median device, with the spread."""
    rows = []
    for r, (m, dev, prod, host) in enumerate(per_rank):
        rows.append(m.replace(variant=v.params | {"rank": r}, metrics=m.metrics | {
            "device": dev, "host": host, "product": prod}))
    ok = [(r, m.value) for r, (m, *_rest) in enumerate(per_rank) if m.ok]
    failed = [(r, m) for r, (m, *_rest) in enumerate(per_rank) if not m.ok]
    if failed:
        r, m = failed[0]
        rows.append(m.replace(variant=v.params, reason=f"rank {r} ({per_rank[r][1]}): {m.reason}"[:300]))
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
    rows.append(head.replace(variant=v.params, metrics=head.metrics | {"spread": spread}))
    return rows


def main() -> int:
    tie_to_parent(os.getppid())  # the launcher's agent, or this rank's gapbench
    rank = int(os.environ.get("RANK", 0))
    folder = os.environ.get("GAPBENCH_DIST_DIR")
    status = Status(folder, rank, int(os.environ.get("LOCAL_RANK", 0)))
    if folder:
        stack = open(os.path.join(folder, f"rank{rank}.stack"), "w")  # noqa: SIM115 - open for the process's life
        faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    every = os.environ.get("GAPBENCH_EVENTS_EVERY_RANK") == "1"
    events = EventWriter() if every or rank == 0 else EventWriter(path="")
    with open(os.environ["GAPBENCH_JOB_FILE"], encoding="utf-8") as f:
        job = WorkloadJob.model_validate_json(f.read())
    limit_memory(job.memory_limit_bytes)
    try:
        run(job, events, status)
    except Exception as e:  # set-up failed, or a rank lost its peers
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
