"""Collective communication: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast and
send/recv between every rank of a torch.distributed job, over a sweep of message sizes.

Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md there): the size of a variant is the whole
buffer — all_reduce/broadcast/send the data, all_gather its output (n chunks), reduce_scatter its input
(n chunks), all_to_all the whole send buffer. algbw = size / time; busbw = algbw × factor, where the
factor makes a perfect ring reach the link's bandwidth: all_reduce 2(n−1)/n; all_gather, reduce_scatter,
all_to_all (n−1)/n; broadcast and send/recv 1. The time of one call is the slowest rank's. The value of a
size row is busbw; two headline rows per collective summarise the sweep: `plateau` (the best busbw among
the large messages, i.e. sizes at least 1/8 of the largest) and `latency` (the time of the smallest message,
in µs). Each variant checks its result against deterministic per-rank fill values (wrong_result on mismatch).
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.results import Measurement
from gapbench.stats import Stats
from gapbench.timing import Timing, TooSlow, time_fn
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.options import DtypeOptions

KiB, MiB, GiB = 2**10, 2**20, 2**30

# op -> (modes it supports, first one is the headline mode)
OPS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("in-place",),  # torch's all_reduce is in-place only
    "all_gather": ("out-of-place", "in-place"),
    "reduce_scatter": ("out-of-place", "in-place"),
    "all_to_all": ("out-of-place",),
    "broadcast": ("in-place",),
    "sendrecv": ("out-of-place",),
}
_SIZES = {
    "tiny": [4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB],
    "standard": [4 * KiB * 4**i for i in range(10)],  # 4 KiB … 1 GiB, ×4
    "large": [4 * KiB * 4**i for i in range(12)],  # 4 KiB … 16 GiB, ×4, as memory allows
}
PLATEAU_FRACTION = 8  # plateau candidates: sizes >= largest / 8


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for op on n ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def busbw_gbps(op: str, n: int, size_bytes: float, seconds: float) -> float:
    """Bus bandwidth in GB/s (1e9 bytes/s)."""
    return size_bytes / seconds * bus_factor(op, n) / 1e9


class Collective(Workload):
    name = "collective"
    category = "collective"
    unit = "GB/s"
    unit_help = ("nccl-tests bus bandwidth: size/time × factor (all_reduce 2(n−1)/n; all_gather, reduce_scatter, "
                 "all_to_all (n−1)/n; broadcast, send/recv 1); latency rows in µs; 1 GB = 1e9 bytes")
    description = "torch.distributed collectives over a message-size sweep: bus bandwidth, latency, plateau"
    presets = {
        "tiny": "4 KiB, 64 KiB, 1 MiB, 8 MiB (CPU/gloo and CI)",
        "standard": "4 KiB … 1 GiB in ×4 steps, capped by device memory",
        "large": "4 KiB … 16 GiB in ×4 steps, capped by device memory",
    }
    default_preset = "standard"
    distributed = True
    options = DtypeOptions
    dtypes = ("fp32", "bf16", "fp16")

    def __init__(self):
        self._rows: dict[tuple, dict[int, tuple[Measurement, Timing]]] = {}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in _SIZES:
            raise ValueError(f"unknown preset {preset!r}")
        dtypes = ctx.dtypes(self.dtypes, default=["fp32"])
        if ctx.dist is None or ctx.dist.world_size < 2:
            return [Variant({"op": "all", "dtype": d, "ranks": ctx.dist.world_size if ctx.dist else 1}) for d in dtypes]
        n = ctx.dist.world_size
        sizes = [s for s in _SIZES[preset] if s <= max_size(ctx)]
        out = []
        for dtype in dtypes:
            for op, modes in OPS.items():
                for mode in modes:
                    for s in sizes:
                        size = _round_size(s, n, DTYPES[dtype].itemsize)
                        out.append(Variant({"op": op, "mode": mode, "bytes": size, "dtype": dtype, "ranks": n},
                                           bytes=float(size)))
                for summary in ("plateau", "latency"):
                    out.append(Variant({"op": op, "summary": summary, "mode": modes[0], "dtype": dtype, "ranks": n}))
        return out

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        if ctx.dist is None or ctx.dist.world_size < 2:
            return self.failed(variant, ctx, "unsupported", "collectives need two or more ranks: run with "
                               "--nproc N (N >= 2) or under torchrun")
        if "summary" in p:
            return self._summary(variant, ctx)
        return self._measure(variant, ctx)

    # ---- one size ---------------------------------------------------------------------------
    def _measure(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        op, n, size = p["op"], p["ranks"], p["bytes"]
        call = _Call(op, p["mode"], size, ctx.device.torch_dtype(p["dtype"]), ctx.dist.rank, n, ctx.device.torch_device)
        call.fill_zero()
        try:
            timing = time_fn(call, ctx.device, ctx.budget(), agreement=ctx.agreement, measure_energy=False)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, size * bus_factor(op, n), 1e-9)
        call.fill_check()
        call()
        ctx.device.synchronize()
        wrong = [f"rank {r}: {e}" for r, e in enumerate(ctx.agreement.all_gather(call.verify())) if e]
        if wrong:
            return self.failed(variant, ctx, "wrong_result", "; ".join(wrong))
        t = timing.median_s
        m = self.throughput(variant, ctx, timing, size * bus_factor(op, n), 1e-9, metrics={
            "size_bytes": size, "algbw_gbps": size / t / 1e9, "busbw_gbps": busbw_gbps(op, n, size, t),
            "bus_factor": bus_factor(op, n), "time_us": t * 1e6, "ranks": n, "backend": ctx.dist.backend,
            "nodes": ctx.dist.node_count, "time_of": "slowest rank per repeat"})
        self._rows.setdefault(_series(p), {})[size] = (m, timing)
        return m

    # ---- headline rows ----------------------------------------------------------------------
    def _summary(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        key = _series(p)
        rows = {s: r for s, r in self._rows.get(key, {}).items() if r[0].ok}
        if not rows:
            # after a restart the sweep is gone: measure the size this row needs
            sizes = [v.params["bytes"] for v in self.variants(ctx.preset, ctx)
                     if _series(v.params) == key and "bytes" in v.params]
            if not sizes:
                return self.failed(variant, ctx, "error", "no message size fits this device")
            size = max(sizes) if p["summary"] == "plateau" else min(sizes)
            self._measure(Variant({k: v for k, v in p.items() if k != "summary"} | {"bytes": size},
                                  bytes=float(size)), ctx)
            rows = {s: r for s, r in self._rows.get(key, {}).items() if r[0].ok}
            if not rows:
                return self.failed(variant, ctx, "error", f"the {size}-byte measurement it needs failed")
        sweep = {str(s): round(r[0].value, 6) for s, r in sorted(rows.items())}
        if p["summary"] == "plateau":
            largest = max(rows)
            best = max((s for s in rows if s >= largest / PLATEAU_FRACTION), key=lambda s: rows[s][0].value)
            m, _ = rows[best]
            return m.replace(variant=p, bytes=float(best), metrics=m.metrics | {
                "from_size_bytes": best, "busbw_by_size": sweep,
                "definition": f"best busbw among sizes >= largest/{PLATEAU_FRACTION}"})
        smallest = min(rows)
        m, timing = rows[smallest]
        stats = Stats.from_samples([t * 1e6 for t in timing.samples])
        return m.replace(variant=p, value=stats.median, stats=stats, unit="us", higher_is_better=False,
                       bytes=float(smallest), metrics=m.metrics | {
                           "from_size_bytes": smallest, "busbw_by_size": sweep,
                           "definition": "time of one call at the smallest size (slowest rank)"})


def _series(p: dict) -> tuple:
    return (p["op"], p["mode"], p["dtype"], p["ranks"])


def _round_size(size: int, n: int, elt: int) -> int:
    """Bytes rounded down so the buffer splits into n whole chunks of elements (at least one each)."""
    count = max(n, size // elt // n * n)
    return count * elt


def max_size(ctx: Context) -> int:
    """Largest message the device can hold: two buffers of the size (all_to_all), in a quarter of free
    memory; where device memory is host memory, the ranks of this host share it."""
    free = ctx.device.free_memory()
    share = ctx.dist.local_world_size if ctx.device.host_memory_is_device_memory and ctx.dist else 1
    return int(free / 4 / 2 / share)


class _Call:
    """The buffers of one collective at one size, the call itself, and its correctness check."""

    def __init__(self, op: str, mode: str, size: int, dtype: torch.dtype, rank: int, n: int, device):
        import torch.distributed as dist

        self.op, self.mode, self.rank, self.n, self.dist = op, mode, rank, n, dist
        # torch 2.13 renamed the tensor forms (*_single); older versions have only *_tensor
        self.gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        count = size // dtype.itemsize
        chunk = count // n
        self.count, self.chunk = count, chunk
        mk = lambda k: torch.empty(k, dtype=dtype, device=device)  # noqa: E731
        if op in ("all_reduce", "broadcast"):
            self.buf = mk(count)
        elif op == "all_gather":
            self.out = mk(count)
            self.inp = self.out.narrow(0, rank * chunk, chunk) if mode == "in-place" else mk(chunk)
        elif op == "reduce_scatter":
            self.inp = mk(count)
            self.out = self.inp.narrow(0, rank * chunk, chunk) if mode == "in-place" else mk(chunk)
        elif op == "all_to_all":
            self.inp, self.out = mk(count), mk(count)
        elif op == "sendrecv":
            self.inp, self.out = mk(count), mk(count)
            self.p2p = [dist.P2POp(dist.isend, self.inp, (rank + 1) % n),
                        dist.P2POp(dist.irecv, self.out, (rank - 1) % n)]
        else:
            raise ValueError(f"unknown collective {op!r}")

    def __call__(self) -> None:
        d, op = self.dist, self.op
        if op == "all_reduce":
            d.all_reduce(self.buf)
        elif op == "broadcast":
            d.broadcast(self.buf, src=0)
        elif op == "all_gather":
            self.gather(self.out, self.inp)
        elif op == "reduce_scatter":
            self.scatter(self.out, self.inp)
        elif op == "all_to_all":
            d.all_to_all_single(self.out, self.inp)
        else:
            for req in d.batch_isend_irecv(self.p2p):
                req.wait()

    def _bufs(self):
        return [b for b in (getattr(self, "buf", None), getattr(self, "inp", None), getattr(self, "out", None))
                if b is not None]

    def fill_zero(self) -> None:
        """Timing data: zeros keep repeated in-place sums finite."""
        for b in self._bufs():
            b.zero_()

    def fill_check(self) -> None:
        """Small integers whose sums stay exact in bf16 up to 85 ranks, distinct per rank and per chunk."""
        r, n, c = self.rank, self.n, self.chunk
        if self.op == "all_reduce":
            self.buf.fill_(r % 2 + 1)
        elif self.op == "broadcast":
            self.buf.fill_(7 if r == 0 else -1)
        elif self.op == "all_gather":
            self.out.fill_(-1)
            self.inp.fill_(r + 1)
        elif self.op == "reduce_scatter":
            for j in range(n):
                self.inp.narrow(0, j * c, c).fill_(j % 2 + 1 + r % 2)
            if self.mode != "in-place":
                self.out.fill_(-1)
        elif self.op == "all_to_all":
            for j in range(n):
                self.inp.narrow(0, j * c, c).fill_((r * n + j) % 251)
            self.out.fill_(-1)
        else:
            self.inp.fill_(r % 251 + 1)
            self.out.fill_(-1)

    def verify(self) -> str:
        """'' when this rank's result is right, else what is wrong."""
        r, n, c = self.rank, self.n, self.chunk
        if self.op == "all_reduce":
            return _expect(self.buf, sum(k % 2 + 1 for k in range(n)), "sum")
        if self.op == "broadcast":
            return _expect(self.buf, 7, "root's data")
        if self.op == "all_gather":
            for j in range(n):
                e = _expect(self.out.narrow(0, j * c, c), j + 1, f"chunk {j}")
                if e:
                    return e
            return ""
        if self.op == "reduce_scatter":
            want = sum(r % 2 + 1 + k % 2 for k in range(n))
            return _expect(self.out, want, "reduced chunk")
        if self.op == "all_to_all":
            for j in range(n):
                e = _expect(self.out.narrow(0, j * c, c), (j * n + r) % 251, f"chunk from rank {j}")
                if e:
                    return e
            return ""
        return _expect(self.out, (r - 1) % n % 251 + 1, f"data from rank {(r - 1) % n}")


def _expect(t: torch.Tensor, value: float, what: str) -> str:
    bad = (t.float() != float(value)).nonzero()
    if bad.numel() == 0:
        return ""
    i = int(bad[0, 0])
    return f"{what}: {bad.shape[0]} of {t.numel()} elements wrong, e.g. [{i}] = {float(t[i])}, expected {value}"
