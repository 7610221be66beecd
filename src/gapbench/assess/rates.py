"""What a results file says a platform sustains, per class of work, each rate with its uncertainty:

  gemm        FLOP/s per dtype at every measured shape: the fixed-shape rows, and every probe shape of the
              sweep rows (metrics.sweep; the finalists' full timings where the sweep has them). fp8: the rows of
              fp32 accumulation (use_fast_accum=False; a file's fp8 row without `accum` is one), the
              like-for-like fp8 GEMM between stacks since ROCm and XPU measure only it; the rows of fast
              accumulation are kept beside them (`gemm_fast_accum`), never priced, averaged or mixed in
              (compare.keys.beside_only), so a CUDA file and a ROCm file are priced by the same accumulation
  grouped     FLOP/s of grouped GEMMs (grouped-gemm: torch._grouped_mm, mixture-of-experts layers) per dtype and
              layout at each measured group shape and group count
  conv        FLOP/s of convolutions per dtype and pass at each measured im2col (m, n, k) and kernel size (3×3,
              1×1)
  attention   FLOP/s of scaled-dot-product attention per dtype and pass (forward, backward) at each measured
              (batch × heads, sequence, head dimension)
  bandwidth   bytes/s of the BabelStream kernels (membw), per dtype and array size: the median over the kernels (a
              dtype without rows of its own reads fp32's)
  elementwise elements/s of the compute-heavy element-wise and normalisation operators (elementwise: gelu,
              bernoulli_, softmax, norms, …) per operator, dtype and size
  optimizer   parameter elements/s of one whole optimizer step (optimizer: AdamW, Adam, SGD) per dtype at each
              measured parameter set (its tensors' sizes)
  per-op      seconds per operator (launch): `op` a bare operator, `train` per operator of an eager training
              step, `infer` per operator of a forward without autograd
  collective  bytes/s of each collective (algorithm bandwidth: message size / time), per message size

A rate's own uncertainty is the standard deviation of its log value from its 95% interval; the run-to-run
spread of the whole platform is kept apart (`spread`): from the rows' runs where the file has several, else the
default of the device class (compare.gaps.RUN_TO_RUN_SPREAD).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from gapbench.compare import platform_identity
from gapbench.compare.gaps import RUN_TO_RUN_SPREAD
from gapbench.compare.keys import ACCUM, beside_only, row_variant
from gapbench.compare.rates import is_end_to_end
from gapbench.results import Measurement, ResultSet
from gapbench.stats import normal_quantile
from gapbench.workloads.micro.options import default_padding, grouped_spec

MEMBW_KERNELS = ("copy", "scale", "add", "triad", "dot")
LAUNCH_KINDS = ("op", "train", "infer")
# channels per group from which a grouped convolution is priced as dense ones of one group's channels: on a CPU
# (oneDNN, one thread, fp32) a 3×3 of 8 channels per group ran forward and backward at 54 GFLOP/s, one group's
# dense convolution at 20 and a depthwise one at 6; a 1×1 at 9.6, 14 and 0.7 (docs/assess.md)
GROUP_CHANNELS_DENSE = 8
# operators priced at the rate of a measured elementwise operator that computes the same thing per element
ELEMENTWISE_ALIASES = {"_safe_softmax": "_softmax", "rsqrt": "sqrt", "bernoulli": "bernoulli_",
                       "native_dropout": "bernoulli_", "lerp_": "lerp", "addcmul_": "addcmul", "addcdiv_": "addcdiv",
                       "mul_": "mul", "add_": "add", "sub": "add", "sub_": "add", "rsub": "add", "div_": "div",
                       "tanh_": "tanh", "_log_softmax_backward_data": "_log_softmax",
                       "_softmax_backward_data": "_softmax", "copy": "copy_",
                       "zero_": "fill_", "native_batch_norm_backward": "native_batch_norm",
                       "_native_batch_norm_legit": "native_batch_norm",
                       "_native_batch_norm_legit_functional": "native_batch_norm"}
# collective workload op names, by the words of the c10d operators that run them
COLLECTIVE_OPS = (("all_gather", "all_gather"), ("allgather", "all_gather"), ("reduce_scatter", "reduce_scatter"),
                  ("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("all_to_all", "all_to_all"),
                  ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("send", "sendrecv"), ("recv", "sendrecv"))


ROUTED_TOTAL_TOLERANCE = 0.05  # a routed row's tokens against a call's: the same layer's tokens, split anew


def same_tokens(row_sizes: tuple[int, ...], call_sizes: tuple[int, ...]) -> bool:
    """Whether a routed row splits as many tokens over as many groups as a call (both have sizes)."""
    total = sum(call_sizes)
    return bool(row_sizes and call_sizes) and len(row_sizes) == len(call_sizes) \
        and abs(sum(row_sizes) - total) <= ROUTED_TOTAL_TOLERANCE * max(total, 1)


@dataclass(frozen=True)
class Rate:
    value: float  # FLOP/s, bytes/s, or seconds per operator (per-op rates)
    sigma: float  # standard deviation of the log value: the measurement's own interval
    source: str  # which row: 'gemm bf16 768x768x768 (sweep probe)'
    flagged: bool = False  # measured on a disturbed host (the host watch)


@dataclass(frozen=True)
class GemmPoint:
    m: int
    n: int
    k: int
    rate: Rate
    kernel: int = 0  # convolutions: kernel elements per channel (9 for 3×3, 1 for 1×1)
    groups: int = 0  # grouped GEMMs: the groups of one call (m, n, k: one group's); grouped convolutions: theirs
    layout: str = ""  # grouped GEMMs: rows | k (which dimension the offsets split)
    sizes: tuple[int, ...] = ()  # grouped GEMMs measured at given group sizes (grouped-gemm:listed); (): equal groups
    stride: int = 1  # convolutions: the stride (a row of conv:listed can have one; the fixed presets' are 1)
    padding: int = -1  # convolutions: the padding (-1: not a convolution)
    cold: bool = False  # measured with the last-level cache overwritten before each call (--flush-cache)


@dataclass(frozen=True)
class AttentionPoint:
    batch_heads: int
    seq: int
    head_dim: int
    rate: Rate
    kv: int = 0  # the keys' sequence (0: the query's)
    causal: bool = False


@dataclass(frozen=True)
class OptimizerPoint:
    params: str  # the parameter set, 'NUMEL*COUNT+…' (optimizer:listed --param-sets)
    elements: int
    tensors: int
    rate: Rate  # parameter elements per second
    cold: bool = False  # measured with the last-level cache overwritten before each step (--flush-cache)


@dataclass(frozen=True)
class SizePoint:
    size: float  # bytes per call (membw: bytes moved per kernel call; collective: message bytes)
    rate: Rate


@dataclass
class PlatformRates:
    name: str
    path: str | None
    device_type: str
    run_id: str = ""
    gemm: dict[str, list[GemmPoint]] = field(default_factory=dict)  # dtype -> points (fp8: fp32 accumulation)
    gemm_fast_accum: dict[str, list[GemmPoint]] = field(default_factory=dict)  # fp8's fast rows: beside, not priced
    grouped: dict[str, list[GemmPoint]] = field(default_factory=dict)  # dtype -> grouped GEMM points
    conv: dict[tuple[str, str], list[GemmPoint]] = field(default_factory=dict)  # (dtype, pass) -> im2col points
    attention: dict[tuple[str, str], list[AttentionPoint]] = field(default_factory=dict)  # (dtype, pass) -> points
    bandwidth: list[SizePoint] = field(default_factory=list)  # fp32's (any dtype's where fp32 has none)
    bandwidth_dtype: dict[str, list[SizePoint]] = field(default_factory=dict)  # dtype -> its own rows
    elementwise: dict[tuple[str, str], list[SizePoint]] = field(default_factory=dict)  # (op, dtype) -> elements/s
    per_op: dict[str, Rate] = field(default_factory=dict)  # launch kind -> seconds per operator
    optimizer: dict[tuple[str, str], list[OptimizerPoint]] = field(default_factory=dict)  # (name, dtype) -> points
    collectives: dict[str, list[SizePoint]] = field(default_factory=dict)  # op -> bytes/s by message size
    spread: float = 0.0  # run-to-run standard deviation of log values for this platform
    spread_basis: str = ""
    models: list[Measurement] = field(default_factory=list)  # ok model-workload rows (predicted vs measured)
    identity: dict = field(default_factory=dict)  # the device identity with its host facts (compare.platform_identity)

    @property
    def synchronous(self) -> bool:
        """Host and device are the same processor: operator overhead and work add up (they overlap otherwise)."""
        return self.device_type == "cpu"

    # ---- lookups -----------------------------------------------------------------------------------------
    def gemm_rate(self, dtype: str, shape: tuple[int, int, int]) -> GemmPoint | None:
        """The measured GEMM of this dtype nearest in shape (sum of |log| ratios of m, n and k); at one shape, a row
        measured cold (`--flush-cache`) before a hot one."""
        return _nearest(self.gemm.get(dtype) or [], shape)

    def grouped_rate(self, dtype: str, shape: tuple[int, int, int], groups: int, layout: str,
                     sizes: tuple[int, ...] = ()) -> GemmPoint | None:
        """The measured grouped GEMM of this dtype at a routed split of the call's own tokens where a row has one:
        the same layout, other two dimensions and number of groups, as many tokens (within ROUTED_TOTAL_TOLERANCE),
        the split nearest the call's (its own sizes first). A router's split is not reproducible from one machine
        to the next (a trace elsewhere draws 130+87+57+… where the rows were measured at 128+87+56+…), and a routed
        row runs at new splits of its tokens on every call anyway. Else the row nearest in one group's shape and,
        at half weight, in the number of groups, among those of the same layout where there are any."""
        points = self.grouped.get(dtype) or []
        same = [p for p in points if p.layout == layout] or points
        if not same:
            return None
        fixed = (1, 2) if layout == "rows" else (0, 1)  # the dimensions the offsets do not split
        own = [p for p in same if p.layout == layout and all((p.m, p.n, p.k)[i] == shape[i] for i in fixed)
               and same_tokens(p.sizes, sizes)]
        if own:
            return min(own, key=lambda p: (sum(abs(a - b) for a, b in zip(p.sizes, sizes, strict=True)),
                                           -p.rate.value))
        g = max(1, groups)
        return min(same, key=lambda p: (shape_distance((p.m, p.n, p.k), shape) + 0.5 * abs(math.log(p.groups / g)),
                                        -p.rate.value))

    def conv_rate(self, dtype: str, backward: bool, shape: tuple[int, int, int], kernel: int = 0,
                  groups: int = 0, stride: int = 1, padding: int | None = None) -> GemmPoint | None:
        """The measured convolution of this dtype and pass nearest in im2col shape, among those of the same kernel
        size where there are any (a 1×1 convolution is a plain GEMM to the backend, a 3×3 one is not). A dense
        convolution only at dense rows, and a grouped one of few channels per group (a depthwise one: one) only at
        grouped rows: it runs memory-bound at a fraction of a dense one's FLOP rate, so without rows of its kind
        there is no rate (None). A grouped one of GROUP_CHANNELS_DENSE or more channels per group runs near the
        rate of dense ones of one group's channels: priced at the grouped rows of as many channels per group (a
        listed row of its own) where there are any, else at the dense rows at one group's im2col shape. A pointwise
        one priced at dense rows (kernel 1, stride 1, no padding) is a GEMM: at the GEMM row nearest its shape
        where that is nearer than every convolution row (on a CPU dense 1×1 convolutions ran at 0.6–0.96 times a
        matmul's rate of the same shape in fp32 on one thread, 0.37–0.91 on two, 0.35–0.53 in bf16: a GEMM row errs
        fast). Among those, the rows of the same stride where there are any (a stride-2 convolution reads four
        times the input per output), and of those the rows of the same padding where there are any (a backend can
        take another algorithm for a pre-padded input: on a CPU a depthwise 3×3 ran up to 4 times apart)."""
        rows = self.conv.get((dtype, "backward" if backward else "forward")) or []
        points, shape, dense = _conv_kind(rows, shape, kernel, groups)
        same = [p for p in points if p.kernel == kernel] or points
        same = [p for p in same if p.stride == max(1, stride)] or same
        point = _nearest([p for p in same if p.padding == padding] or same, shape)
        if dense and kernel == 1 and max(1, stride) == 1 and not padding:
            # a pointwise convolution is a GEMM (pixels × output channels × input channels): where a GEMM row is
            # nearer its shape than any convolution row, that row prices it
            return _nearer(self.gemm_rate(dtype, shape), point, shape)
        return point

    def elementwise_at(self, op: str, dtype: str, elements: int) -> SizePoint | None:
        """The measured rate of this operator (or the one it is priced as) and dtype nearest in elements."""
        points = self.elementwise.get((ELEMENTWISE_ALIASES.get(op, op), dtype)) or []
        if not points or elements <= 0:
            return None
        return min(points, key=lambda p: abs(math.log(p.size / elements)))

    def optimizer_at(self, name: str, dtype: str, params: str, elements: int, tensors: int) -> OptimizerPoint | None:
        """The measured step of this optimizer and dtype over the same parameter set where there is one, else the
        nearest in elements and, at half weight, in the number of tensors (each tensor is a loop's worth of operator
        calls)."""
        points = self.optimizer.get((name, dtype)) or []
        if not points or elements <= 0:
            return None
        same = [p for p in points if p.params == params]
        # at one distance a step measured cold before a hot one: a training step meets its optimizer's parameters,
        # gradients and state after the forward and backward passes have gone through the cache
        return min(same or points, key=lambda p: (abs(math.log(p.elements / elements))
                                                  + 0.5 * abs(math.log(p.tensors / max(1, tensors))), not p.cold,
                                                  -p.rate.value))

    def attention_rate(self, dtype: str, backward: bool, shape: tuple[int, int, int], kv: int = 0,
                       causal: bool = False) -> AttentionPoint | None:
        """The measured attention of this dtype and pass, among the rows as causal as the call where there are any
        (a causal kernel skips half the scores), nearest in the query's and the keys' sequence and head dimension,
        then in batch × heads (sum of |log| ratios, the last at half weight)."""
        points = self.attention.get((dtype, "backward" if backward else "forward")) or []
        if not points:
            return None
        bh, seq, d = (max(1, x) for x in shape)
        keys = max(1, kv or seq)
        same = [p for p in points if p.causal == causal] or points
        return min(same, key=lambda p: (abs(math.log(p.seq / seq)) + abs(math.log((p.kv or p.seq) / keys))
                                        + abs(math.log(p.head_dim / d)) + 0.5 * abs(math.log(p.batch_heads / bh)),
                                        -p.rate.value))

    def bandwidth_at(self, nbytes: float, dtype: str | None = None) -> SizePoint | None:
        """The memory-bandwidth row nearest in bytes moved per call, of this dtype where it has rows (bf16 on a
        CPU moves at a third of fp32's rate in cache: each element is converted to be added), else fp32's."""
        points = self.bandwidth_dtype.get(dtype or "") or self.bandwidth
        if not points:
            return None
        b = max(nbytes, 1.0)
        return min(points, key=lambda p: abs(math.log(p.size / b)))

    def collective_at(self, op: str, nbytes: float) -> SizePoint | None:
        name = collective_name(op)
        points = self.collectives.get(name or "") or []
        if not points:
            return None
        b = max(nbytes, 1.0)
        return min(points, key=lambda p: abs(math.log(p.size / b)))


def channels_per_group(k: int, kernel: int) -> int:
    """Input channels per group of a convolution from its im2col k (channels per group × kernel elements)."""
    return max(1, k // max(1, kernel))


def _conv_kind(rows: list[GemmPoint], shape: tuple[int, int, int], kernel: int,
               groups: int) -> tuple[list[GemmPoint], tuple[int, int, int], bool]:
    """(the convolution rows of its kind, the shape to look them up at, whether they are dense rows): a dense
    convolution's are the dense rows; a grouped one's the grouped rows on its side of GROUP_CHANNELS_DENSE, else,
    at as many channels per group or more, the dense rows at one group's shape, else any grouped rows."""
    dense = [p for p in rows if p.groups <= 1]
    if groups <= 1:
        return dense, shape, True
    many = channels_per_group(shape[2], kernel) >= GROUP_CHANNELS_DENSE
    grouped = [p for p in rows if p.groups > 1]
    alike = [p for p in grouped if (channels_per_group(p.k, p.kernel) >= GROUP_CHANNELS_DENSE) == many]
    if not alike and many and dense:
        return dense, (shape[0], max(1, shape[1] // groups), shape[2]), True
    return alike or grouped, shape, False


def _nearer(a: GemmPoint | None, b: GemmPoint | None, shape: tuple[int, int, int]) -> GemmPoint | None:
    """Of two rows, the one nearer the shape (b at a tie)."""
    if a is None or b is None:
        return b or a
    return a if shape_distance((a.m, a.n, a.k), shape) < shape_distance((b.m, b.n, b.k), shape) else b


def _nearest(points: list[GemmPoint], shape: tuple[int, int, int]) -> GemmPoint | None:
    """The point nearest in shape; at one distance a row measured cold before a hot one (a model's step streams
    its weights and activations through the cache: a GEMM of the step meets them in memory, as a cold row does),
    then the faster."""
    if not points:
        return None
    return min(points, key=lambda p: (shape_distance((p.m, p.n, p.k), shape), not p.cold, -p.rate.value))


def shape_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """How far two GEMM shapes are apart: the sum of |log| ratios of m, n and k (each at least 1)."""
    return sum(abs(math.log(max(1, x) / max(1, y))) for x, y in zip(a, b, strict=True))


def collective_name(aten_op: str) -> str | None:
    """'c10d.allreduce_.default' -> 'all_reduce' (the collective workload's name)."""
    base = aten_op.split(".")[1] if "." in aten_op else aten_op
    return next((name for word, name in COLLECTIVE_OPS if word in base), None)


def sigma_of(m: Measurement) -> float:
    """The standard deviation of a measurement's log value implied by its confidence interval (0 without one)."""
    s = m.stats
    if s is None or s.n < 2 or s.ci95[0] <= 0 or s.ci95[1] <= 0 or s.ci95[1] <= s.ci95[0]:
        return 0.0
    level = s.ci_level if 0 < s.ci_level < 1 else 0.95
    z = normal_quantile(0.5 + level / 2)
    return math.log(s.ci95[1] / s.ci95[0]) / (2 * z)


def _rate(m: Measurement, value: float, source: str, sigma: float | None = None) -> Rate:
    return Rate(value, sigma_of(m) if sigma is None else sigma, source, m.flagged)


def _gemm_points(m: Measurement) -> list[GemmPoint]:
    v, mt = row_variant(m.workload, m.variant), m.metrics or {}
    dtype = str(v.get("dtype")) + (f" accum {v[ACCUM]}" if ACCUM in v else "")  # the label: 'fp8 accum fp32'
    if not v.get("sweep"):
        try:  # a row whose shape is not three whole numbers (a file's variant is free-form) gives no rate
            shape = (int(v["m"]), int(v["n"]), int(v["k"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            return []
        cold = _cold(m)
        return [GemmPoint(*shape, _rate(m, m.value * 1e12, f"gemm {dtype} {shape[0]}x{shape[1]}x{shape[2]}"
                                                           + (" (cold cache)" if cold else "")), cold=cold)]
    sigma = sigma_of(m)
    full = {(f["m"], f["n"], f["k"]): f.get("tflops_full") for f in mt.get("finalists") or []
            if isinstance(f, dict) and isinstance(f.get("tflops_full"), (int, float))}
    out = []
    for p in mt.get("sweep") or []:
        try:
            shape = (int(p["m"]), int(p["n"]), int(p["k"]))
            tflops = float(full.get(shape) or p["tflops"])
        except (KeyError, TypeError, ValueError):
            continue
        if tflops > 0:
            how = "sweep finalist" if shape in full else "sweep probe"
            out.append(GemmPoint(*shape, _rate(m, tflops * 1e12, f"gemm {dtype} {shape[0]}x{shape[1]}x{shape[2]} "
                                                                 f"({how})", sigma)))
    return out


def _bandwidth_points(rows: list[Measurement]) -> list[SizePoint]:
    groups: dict[tuple, list[Measurement]] = {}
    for m in rows:
        groups.setdefault((m.variant.get("elements"), m.variant.get("dtype")), []).append(m)
    out = []
    for (elements, dtype), ms in groups.items():
        sizes = [float(m.bytes) for m in ms if m.bytes]
        if not sizes:
            continue
        kernels = "/".join(str(m.variant.get("kernel")) for m in ms)
        rate = Rate(statistics.median(m.value * 1e9 for m in ms), statistics.median(sigma_of(m) for m in ms),
                    f"membw {dtype} {elements} elements ({kernels}, median)", any(m.flagged for m in ms))
        out.append(SizePoint(statistics.median(sizes), rate))
    return sorted(out, key=lambda p: p.size)


def _collective_points(rows: list[Measurement]) -> dict[str, list[SizePoint]]:
    out: dict[str, list[SizePoint]] = {}
    for m in rows:
        v, mt = m.variant, m.metrics or {}
        algbw = mt.get("algbw_gbps")
        if "bytes" not in v or not isinstance(algbw, (int, float)) or algbw <= 0:
            continue
        out.setdefault(str(v["op"]), []).append(SizePoint(float(v["bytes"]), _rate(
            m, algbw * 1e9, f"collective {v['op']} {v['bytes']} B, {v.get('ranks')} ranks")))
    return out


def _spread(rs: ResultSet) -> tuple[float, str]:
    """(sigma, basis): the run-to-run uncertainty of this platform's level, from its rows' runs when it has them
    (the median over rows of the standard deviation of log run values, over √runs), else the device class's."""
    sds, ns = [], []
    for m in rs.measurements:
        vals = [math.log(x) for x in m.run_values if x > 0] if m.ok else []
        if len(vals) >= 2:
            sds.append(statistics.stdev(vals))
            ns.append(len(vals))
    if sds:
        n = int(statistics.median(ns))
        return statistics.median(sds) / math.sqrt(n), f"measured: {n} runs"
    cls = "cpu" if rs.device.get("type") == "cpu" else "accelerator"
    return RUN_TO_RUN_SPREAD[cls], f"single run: the {cls} default run-to-run spread"


def platform_rates(rs: ResultSet) -> PlatformRates:
    """Every rate the prediction can use from one results file (merged runs are one row each)."""
    ok = [m for m in rs.measurements if m.ok and m.value is not None and m.value > 0]
    pr = PlatformRates(rs.name, rs.path, str(rs.device.get("type") or ""), "+".join(rs.run_ids))
    for m in ok:
        add = _ROWS.get(m.workload)
        if add is not None:
            try:
                add(pr, m)
            except (KeyError, TypeError, ValueError, OverflowError):  # a variant a file holds is free-form: a row
                continue  # whose shape fields are missing or not numbers gives no rate
        elif is_end_to_end(m):
            pr.models.append(m)
    membw = [m for m in ok if m.workload == "membw" and m.variant.get("kernel") in MEMBW_KERNELS]
    for dtype in sorted({str(m.variant.get("dtype")) for m in membw}):
        pr.bandwidth_dtype[dtype] = _bandwidth_points([m for m in membw if str(m.variant.get("dtype")) == dtype])
    pr.bandwidth = pr.bandwidth_dtype.get("fp32") or _bandwidth_points(membw)
    pr.collectives = _collective_points([m for m in ok if m.workload == "collective"])
    pr.spread, pr.spread_basis = _spread(rs)
    pr.identity = platform_identity(rs)
    return pr


def _add_gemm(pr: PlatformRates, m: Measurement) -> None:
    if "m" in m.variant or m.variant.get("sweep"):
        rates = pr.gemm_fast_accum if beside_only(m.workload, m.variant) else pr.gemm
        rates.setdefault(str(m.variant.get("dtype")), []).extend(_gemm_points(m))


def _add_elementwise(pr: PlatformRates, m: Measurement) -> None:
    v = m.variant
    if "op" in v:
        pr.elementwise.setdefault((str(v["op"]), str(v.get("dtype"))), []).append(SizePoint(
            float(v["elements"]), _rate(m, m.value * 1e9, f"elementwise {v['op']} {v.get('dtype')} "
                                                          f"{v['elements']} elements")))


def _add_launch(pr: PlatformRates, m: Measurement) -> None:
    if m.variant.get("kind") in LAUNCH_KINDS:
        pr.per_op[m.variant["kind"]] = _rate(m, m.value * 1e-6, f"launch {m.variant['kind']}")


def _add_conv(pr: PlatformRates, m: Measurement) -> None:
    """A convolution row as the im2col GEMM (output pixels × batch, output channels, input channels × K²)."""
    v = m.variant
    if v.get("pass") not in ("forward", "backward"):
        return
    ks, groups, stride = int(v.get("kernel", 3)), int(v.get("groups", 1)), int(v.get("stride", 1))
    pad = int(v.get("padding", default_padding(ks)))
    mm, nn, kk = v["batch"] * v["hw"] * v["hw"], v["c_out"], v["c_in"] // groups * ks ** 2
    kind = f"depthwise {ks}×{ks} {v['c_in']} ch" if groups > 1 else f"{ks}×{ks} {v['c_in']}→{v['c_out']} ch"
    pr.conv.setdefault((str(v.get("dtype")), v["pass"]), []).append(GemmPoint(int(mm), int(nn), int(kk), _rate(
        m, m.value * 1e12, f"conv {v.get('dtype')} {v['pass']} {kind} {v['hw']}² ×{v['batch']}"
        + (f" stride {stride}" if stride > 1 else "") + (f" padding {pad}" if pad != default_padding(ks) else "")),
        ks * ks, groups=groups if groups > 1 else 0, stride=stride, padding=pad))


def _add_grouped(pr: PlatformRates, m: Measurement) -> None:
    v = m.variant
    g, mm, nn, kk = int(v["groups"]), int(v["m"]), int(v["n"]), int(v["k"])
    sizes = tuple(int(x) for x in str(v["sizes"]).split("+")) if v.get("sizes") else ()
    what = f"{g}×{mm}x{nn}x{kk}" if not sizes else \
        grouped_spec(str(v.get("layout")), sizes, *((nn, kk) if v.get("layout") == "rows" else (mm, nn)))
    pr.grouped.setdefault(str(v.get("dtype")), []).append(GemmPoint(mm, nn, kk, _rate(
        m, m.value * 1e12, f"grouped-gemm {v.get('dtype')} {what} ({v.get('layout')})"),
        groups=g, layout=str(v.get("layout", "")), sizes=sizes))


def _add_attention(pr: PlatformRates, m: Measurement) -> None:
    v = m.variant
    if v.get("pass") not in ("forward", "backward"):
        return
    kv, causal = int(v.get("kv", 0)), bool(v.get("causal", False))
    pr.attention.setdefault((str(v.get("dtype")), v["pass"]), []).append(AttentionPoint(
        int(v["batch_heads"]), int(v["seq"]), int(v["head_dim"]), _rate(
            m, m.value * 1e12, f"attention {v.get('dtype')} {v['pass']} {v['batch_heads']}×{v['seq']}×"
                               f"{v['head_dim']}" + (f" keys {kv}" if kv else "") + (" causal" if causal else "")),
        kv if kv != int(v["seq"]) else 0, causal))


def _cold(m: Measurement) -> bool:
    """The row was timed with the last-level cache overwritten before each call (--flush-cache)."""
    return bool((m.metrics or {}).get("cache_flush_bytes"))


def _add_optimizer(pr: PlatformRates, m: Measurement) -> None:
    v = m.variant
    pr.optimizer.setdefault((str(v["optimizer"]), str(v.get("dtype"))), []).append(OptimizerPoint(
        str(v["params"]), int(v["elements"]), int(v["tensors"]), _rate(
            m, m.value * 1e9, f"optimizer {v['optimizer']} {v.get('dtype')} {int(v['elements']) / 1e6:.3g} M elements "
                              f"in {v['tensors']} tensors" + (" (cold cache)" if _cold(m) else "")), _cold(m)))


# the rows each micro workload contributes (model workloads are end-to-end rows, the measured check)
_ROWS = {"gemm": _add_gemm, "grouped-gemm": _add_grouped, "conv": _add_conv, "elementwise": _add_elementwise, "attention": _add_attention,
         "launch": _add_launch, "optimizer": _add_optimizer}
