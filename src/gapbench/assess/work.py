"""A model's work by class, from one traced step: every ATen operator with its shapes, FLOPs and bytes.

The step runs under FakeTensorMode (shapes only: no memory, no arithmetic) below autograd, as `gapbench ops`
traces it, and each operator call is recorded with what it costs a machine:

  FLOPs   torch.utils.flop_counter's formulas (matmul, convolution, attention), and 2·m·n·k summed over the groups
          of a grouped matmul (torch._grouped_mm, which it has none for); none for other operators
  bytes   the tensors it reads plus the tensors it writes (numel × element size); none for views, which move
          no data
  class   gemm (matrix multiplies), conv (convolutions, forward and backward), attention (scaled-dot-product
          kernels), collective (c10d operators), view (returns an alias of an input), memory (everything else:
          element-wise operators, reductions, norms, copies, embeddings, optimizer updates)
  phase   forward, backward (autograd's), or optimizer (inside an optimizer's step: torch.optim's step hooks)

Calls of one operator with the same class, dtype and shapes are one `Item` with a count. Each optimizer step the
trace runs is also kept whole (`OptimizerStep`: which optimizer, its parameters' sizes and dtype), so that its
calls can be priced as one measured step over the same parameters (the optimizer rows) rather than operator by
operator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from gapbench.coverage.dispatch import OpRecorder, in_backward
from gapbench.devices.dtypes import name_of
from gapbench.workloads.micro.launch import SKIPPED, is_composite
from gapbench.workloads.micro.options import default_padding, grouped_spec, param_set_spec

CLASSES = ("gemm", "conv", "attention", "memory", "collective", "view")
COMPUTE = ("gemm", "conv", "attention")  # classes priced by a FLOP rate
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")


@dataclass(frozen=True)
class Item:
    """Calls of one operator with one signature: what each call costs, and how many there were."""

    op: str  # 'aten.mm.default'
    cls: str  # one of CLASSES
    dtype: str  # of its first tensor argument ('fp32', 'bf16', …; the torch name when it has no short one)
    phase: str  # forward | backward | optimizer
    flops: float  # per call
    bytes: float  # per call: tensors read + written (a collective: its message, the first tensor)
    shape: tuple[int, int, int] | None = None  # gemm, conv: (m, n, k) of one (im2col) GEMM; attention: (batch ×
    #                                               heads, seq, head dim)
    count: int = 1
    elements: int = 0  # memory class: elements of its largest output (the unit of an element-wise rate)
    kernel: int = 0  # conv: kernel elements per channel (1 for 1×1, 9 for 3×3)
    groups: int = 0  # a grouped gemm: its groups (shape is then one group's (m, n, k)); a grouped conv: its groups
    #                  (the channels of a depthwise one); 0: not grouped
    layout: str = ""  # a grouped gemm: rows (the offsets split the rows) | k (they split the shared dimension)
    sizes: tuple[int, ...] = ()  # a grouped gemm traced on real tensors: each group's rows (rows) or share of k (k)
    images: int = 0  # conv: the batch (the images of one call; shape's m is images × output pixels)
    stride: int = 0  # conv: its stride (the larger of its two; 0: not a convolution)
    padding: int = 0  # conv: its padding (the larger of its two)
    kv: int = 0  # attention: the keys' sequence where it is not the query's (0: the same)
    causal: bool = False  # attention: a causal kernel (is_causal)

    @property
    def key(self) -> tuple:
        return (self.op, self.cls, self.dtype, self.phase, self.flops, self.bytes, self.shape, self.elements,
                self.kernel, self.groups, self.layout, self.sizes, self.images, self.stride, self.padding, self.kv,
                self.causal)

    @property
    def attention_spec(self) -> str | None:
        """A scaled-dot-product call as `attention:listed --attention-shapes` measures it, BHxSxD[xKV][c]: batch ×
        heads, the query's sequence, the head dimension, the keys' sequence where it differs, `c` for a causal one;
        None for anything else. Forward and backward of one attention give the same spec."""
        if self.cls != "attention" or not self.shape:
            return None
        bh, seq, d = self.shape
        return f"{bh}x{seq}x{d}" + (f"x{self.kv}" if self.kv and self.kv != seq else "") + ("c" if self.causal else "")

    @property
    def grouped_spec(self) -> str | None:
        """A grouped matrix multiply traced on real tensors as `grouped-gemm:listed --grouped-shapes` measures it,
        SIZESxNxK (layout rows) or MxNxSIZES (layout k), its groups' own sizes joined by +; None for anything else
        (a trace on fake tensors knows no sizes)."""
        if self.cls != "gemm" or not self.groups or len(self.sizes) < 2 or not self.shape:
            return None     # one group is a dense GEMM (and a spec without + reads as layout rows)
        m, n, k = self.shape
        return grouped_spec(self.layout, self.sizes, *((n, k) if self.layout == "rows" else (m, n)))

    @property
    def conv_spec(self) -> str | None:
        """A 2-D convolution as `conv:listed --conv-shapes` measures it, NxCINxCOUTxHWxKxG[xS[xP]]: the batch, the
        channels, the output's side (of a square with its pixels), the kernel's side, the groups, then the stride and
        the padding where they are not conv:listed's defaults (1; K // 2 for an odd kernel, 0 for an even one); a
        pointwise 1-D one as a 1×1 2-D one over the square nearest its positions; None for anything else (another
        1-D, a 3-D, dilated or transposed convolution, a kernel that is not square). Forward and backward of one
        convolution give the same spec."""
        if self.cls != "conv" or not self.shape or self.kernel <= 0 or self.images <= 0:
            return None
        m, n, k = self.shape
        images, groups = self.images, max(1, self.groups)
        hw = max(1, round(math.sqrt(m / images)))
        side = round(math.sqrt(self.kernel))
        if side * side != self.kernel or (hw - 1) * max(1, self.stride) + side - 2 * self.padding < 1:
            return None     # a 1×7 kernel, or a padding wider than the kernel (a causal one): no square row has it
        c_in = max(1, k // self.kernel) * groups
        spec = f"{images}x{c_in}x{n}x{hw}x{side}x{groups}"
        padded = self.padding != default_padding(side)
        return spec + (f"x{max(1, self.stride)}" if self.stride > 1 or padded else "") \
            + (f"x{self.padding}" if padded else "")

    @property
    def packet(self) -> str:
        """The operator without namespace and overload: 'aten.gelu.default' -> 'gelu'."""
        parts = self.op.split(".")
        return parts[1] if len(parts) >= 2 else self.op

    def to_dict(self) -> dict:
        return {"op": self.op, "class": self.cls, "dtype": self.dtype, "phase": self.phase, "count": self.count,
                "flops": self.flops, "bytes": self.bytes, "shape": list(self.shape) if self.shape else None,
                "elements": self.elements, "kernel": self.kernel,
                **({"groups": self.groups, "layout": self.layout} if self.groups else {}),
                **({"sizes": list(self.sizes)} if self.sizes else {}),
                **({"images": self.images, "stride": self.stride, "padding": self.padding} if self.images else {}),
                **({"kv": self.kv} if self.kv else {}), **({"causal": True} if self.causal else {})}


@dataclass(frozen=True)
class OptimizerStep:
    """One optimizer step of the trace: the optimizer, the parameters it updated (those with a gradient) and the
    operator calls it made."""

    name: str  # the optimizer's class, lower case ('adamw')
    dtype: str  # its parameters' ('fp32', 'bf16'; the first parameter's where they differ)
    sizes: tuple[tuple[int, int], ...]  # (elements of a tensor, how many tensors), the largest first
    calls: int = 0  # ATen operator calls inside the step

    @property
    def elements(self) -> int:
        return sum(n * c for n, c in self.sizes)

    @property
    def tensors(self) -> int:
        return sum(c for _, c in self.sizes)

    @property
    def spec(self) -> str:
        """The parameter set as `optimizer:listed --param-sets` measures it."""
        return param_set_spec(self.sizes)

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "params": self.spec, "elements": self.elements,
                "tensors": self.tensors, "calls": self.calls}


@dataclass
class Work:
    """The traced step's operator calls, aggregated; `target` names what was traced."""

    target: str
    items: list[Item] = field(default_factory=list)
    dtype: str | None = None  # the precision the step was traced at, when known ('fp32', 'bf16', …)
    variant: dict | None = None  # a built-in workload's variant parameters for the traced iteration
    fake: bool = True
    notes: list[str] = field(default_factory=list)  # what the trace leaves out
    optimizers: list[OptimizerStep] = field(default_factory=list)  # the optimizer steps the trace ran

    @property
    def optimizer_calls(self) -> int:
        return sum(i.count for i in self.items if i.phase == "optimizer")

    @property
    def calls(self) -> int:
        return sum(i.count for i in self.items)

    @property
    def has_backward(self) -> bool:
        return any(i.phase == "backward" for i in self.items)

    def by_class(self) -> dict[str, dict[str, float]]:
        """{class: {calls, flops, bytes}} over the whole step."""
        out = {c: {"calls": 0, "flops": 0.0, "bytes": 0.0} for c in CLASSES}
        for i in self.items:
            d = out[i.cls]
            d["calls"] += i.count
            d["flops"] += i.flops * i.count
            d["bytes"] += i.bytes * i.count
        return out

    def to_dict(self) -> dict:
        return {"target": self.target, "dtype": self.dtype, "variant": self.variant, "fake": self.fake,
                "calls": self.calls,
                "classes": self.by_class(), "items": [i.to_dict() for i in self.items], "notes": list(self.notes),
                **({"optimizers": [o.to_dict() for o in self.optimizers]} if self.optimizers else {})}


class WorkRecorder(OpRecorder):
    """OpRecorder (operator counts by phase and dtypes, for `gapbench ops --against`) that also records each
    call's class, shapes, FLOPs and bytes."""

    def __init__(self):
        super().__init__()
        self._items: dict[tuple, Item] = {}
        self._optimizers: list[OptimizerStep] = []
        self._hooks: list = []  # torch.optim's global step hooks, while the recorder is entered
        self._depth = 0
        self._opt_depth = 0  # inside an optimizer's step
        self._opt_start = 0

    def __enter__(self):
        if self._depth == 0:
            from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

            self._hooks = [register_optimizer_step_pre_hook(self._step_begins),
                           register_optimizer_step_post_hook(self._step_ends)]
        self._depth += 1
        return super().__enter__()

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for h in self._hooks:
                h.remove()
            self._hooks = []
        return super().__exit__(*exc)

    def _step_begins(self, optimizer, args, kwargs) -> None:
        self._opt_depth += 1
        if self._opt_depth == 1:
            self._opt_start = self._optimizer_calls()

    def _step_ends(self, optimizer, args, kwargs) -> None:
        self._opt_depth = max(0, self._opt_depth - 1)
        if self._opt_depth:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]
                  if isinstance(p, torch.Tensor) and p.grad is not None]
        if not params:
            return
        sizes: dict[int, int] = {}
        for p in params:
            sizes[p.numel()] = sizes.get(p.numel(), 0) + 1
        self._optimizers.append(OptimizerStep(
            type(optimizer).__name__.lower(), dtype_name(params[0].dtype),
            tuple(sorted(sizes.items(), key=lambda x: -x[0])), self._optimizer_calls() - self._opt_start))

    def _optimizer_calls(self) -> int:
        return sum(i.count for i in self._items.values() if i.phase == "optimizer")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if is_composite(func):
            # under inference_mode composite operators reach the mode undecomposed; record their kernels
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        name = str(func)
        if name.startswith(SKIPPED):
            return out
        phase = "optimizer" if self._opt_depth else "backward" if self.backward_call or in_backward() else "forward"
        (self.backward if phase == "backward" else self.forward)[name] += 1
        first = next((a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)), None)
        if first is not None:
            self.dtypes.setdefault(name, set()).add(str(first.dtype).replace("torch.", ""))
        item = describe(func, args, kwargs, out, phase)
        prev = self._items.get(item.key)
        self._items[item.key] = item if prev is None else _more(prev)
        return out

    def work(self, target: str, **kw) -> Work:
        return Work(target, list(self._items.values()), optimizers=list(self._optimizers), **kw)


def _more(item: Item) -> Item:
    from dataclasses import replace

    return replace(item, count=item.count + 1)


def dtype_name(dtype: torch.dtype | None) -> str:
    return name_of(dtype)


def _tensors(x) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> float:
    return float(t.numel() * t.element_size())


def op_class(func) -> str:
    """gemm | conv | attention | collective | view | memory for an ATen operator overload."""
    name = str(func)
    packet = name.rsplit(".", 1)[0]
    if name.split(".")[0] in COLLECTIVE_NAMESPACES:
        return "collective"
    if any(k in packet for k in ("scaled_dot_product", "flash_attention", "efficient_attention", "flex_attention")):
        return "attention"
    if _flop_formula(func) is not None:
        return "conv" if "conv" in packet else "gemm"
    if _is_view(func):
        return "view"
    return "memory"


def _is_view(func) -> bool:
    """The operator returns aliases of its inputs and writes none of them (view, t, expand, detach, …)."""
    if func.overloadpacket in _VIEWS_BY_NAME:
        return True
    returns = getattr(getattr(func, "_schema", None), "returns", None) or []
    infos = [r.alias_info for r in returns]
    return bool(infos) and all(a is not None and not a.is_write for a in infos)


# views whose schema does not say so: they return a new tensor object over the same memory
_VIEWS_BY_NAME = {torch.ops.aten._unsafe_view, torch.ops.aten.lift_fresh}


def _flop_formula(func):
    from torch.utils.flop_counter import flop_registry

    return flop_registry.get(func.overloadpacket) or _EXTRA_FLOPS.get(str(func.overloadpacket))


def _sdpa_cpu(query, key, value, *args, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _sdpa_cpu_backward(grad_out, query, key, value, *args, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


def grouped_dims(args) -> tuple[int, tuple[int, int, int], str] | None:
    """(groups, one group's (m, n, k), layout) of a torch._grouped_mm call, the groups taken as equal (a trace on
    fake tensors does not know the offsets' values): a 2-D operand times a 3-D one — the rows split, layout
    `rows`; two 2-D operands — the shared dimension split, one (m, n) product per group, layout `k`; two 3-D
    operands — a batch of equal groups."""
    ts = _tensors(args)
    if len(ts) < 2:
        return None
    a, b = ts[0], ts[1]
    offs = ts[2] if len(ts) > 2 and ts[2].dim() == 1 else None
    g = int(offs.shape[0]) if offs is not None else (int(b.shape[0]) if b.dim() == 3 else 1)
    g = max(1, g)
    if a.dim() == 2 and b.dim() == 3:
        return g, (max(1, int(a.shape[0]) // g), int(b.shape[-1]), int(a.shape[1])), "rows"
    if a.dim() == 2 and b.dim() == 2:
        return g, (int(a.shape[0]), int(b.shape[1]), max(1, int(a.shape[1]) // g)), "k"
    if a.dim() == 3 and b.dim() == 3:
        return int(a.shape[0]), (int(a.shape[1]), int(b.shape[-1]), int(a.shape[2])), "rows"
    if a.dim() == 3 and b.dim() == 2:  # one (m, k) per group times its share of b's columns
        return int(a.shape[0]), (int(a.shape[1]), max(1, int(b.shape[1]) // int(a.shape[0])), int(a.shape[2])), \
            "rows"
    return None


def grouped_sizes(args) -> tuple[int, ...]:
    """Each group's size (rows, or share of the shared dimension) of a torch._grouped_mm call with offsets, read from
    the offsets' values; () where they have none (fake tensors, a batch of equal groups)."""
    from torch._subclasses.fake_tensor import FakeTensor

    ts = _tensors(args)
    offs = ts[2] if len(ts) > 2 and ts[2].dim() == 1 else None
    if offs is None or isinstance(offs, FakeTensor) or offs.device.type == "meta" or ts[0].dim() != 2 \
            or ts[1].dim() not in (2, 3):
        return ()   # only where the offsets split the rows or the shared dimension (a 3-D × 2-D call splits n)
    ends = [int(x) for x in offs.tolist()]
    return tuple(e - s for s, e in zip([0, *ends[:-1]], ends, strict=True))


def _grouped_mm(*args, **kwargs) -> int:
    dims = grouped_dims(args)
    if dims is None:
        return 0
    g, (m, n, k), layout = dims
    total = sum(grouped_sizes(args))  # the groups' own sizes where the offsets have values: no mean rounded down
    if total:
        return 2 * total * n * k if layout == "rows" else 2 * m * n * total
    return 2 * g * m * n * k


# operators that torch.utils.flop_counter has no entry for: CPU attention kernels (with its SDPA formulas) and
# grouped matrix multiplies (mixture-of-experts layers)
_EXTRA_FLOPS = {
    "aten._scaled_dot_product_flash_attention_for_cpu": _sdpa_cpu,
    "aten._scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_cpu_backward,
    "aten._grouped_mm": _grouped_mm,
}


def op_flops(func, args, kwargs, out) -> float:
    """FLOPs of one call by torch.utils.flop_counter's formula for the operator (0 when it has none); a grouped
    convolution's backward by its own count (`grouped_conv_backward_flops`)."""
    f = _flop_formula(func)
    if f is None:
        return 0.0
    if str(func.overloadpacket) == "aten.convolution_backward" and conv_groups(func, args):
        return grouped_conv_backward_flops(args)
    try:
        if str(func.overloadpacket) in _EXTRA_FLOPS:
            return float(f(*args, **kwargs))
        return float(f(*args, **kwargs, out_val=out))
    except Exception:  # a formula that does not fit this overload's arguments: say nothing rather than guess
        return 0.0


def op_bytes(func, args, kwargs, out, cls: str) -> float:
    """Tensors read plus tensors written by one call; 0 for a view (no data moves)."""
    if cls == "view":
        return 0.0
    seen: set[int] = set()
    total = 0.0
    for t in _tensors((args, kwargs)):
        if id(t) not in seen:
            seen.add(id(t))
            total += _nbytes(t)
    return total + sum(_nbytes(t) for t in _tensors(out))


def gemm_shape(func, args, flops: float) -> tuple[int, int, int] | None:
    """The (m, n, k) of one matrix multiply: its matrices (mm, addmm, bmm with the batch folded into m), else the
    cube with the call's FLOPs."""
    ts = _tensors(args)
    packet = str(func.overloadpacket).split(".")[-1]
    dims = None
    if packet in ("mm", "_scaled_mm") and len(ts) >= 2:
        (m, k), n = ts[0].shape[-2:], ts[1].shape[-1]
        dims = (m, n, k)
    elif packet == "addmm" and len(ts) >= 3:
        (m, k), n = ts[1].shape[-2:], ts[2].shape[-1]
        dims = (m, n, k)
    elif packet in ("bmm", "baddbmm") and len(ts) >= 2:
        a, b = ts[-2], ts[-1]
        dims = (a.shape[0] * a.shape[1], b.shape[-1], a.shape[-1])
    if dims is None and flops > 0:
        side = max(1, round((flops / 2) ** (1 / 3)))
        dims = (side, side, side)
    return tuple(int(d) for d in dims) if dims else None


def conv_shape(func, args, out) -> tuple[int, int, int] | None:
    """The im2col GEMM of a convolution, forward or backward: (output pixels × batch, output channels, input
    channels per group × kernel), from the weight and the output (forward) or the output gradient (backward)."""
    ts = _tensors(args)
    backward = "backward" in str(func)
    if backward and len(ts) >= 3:
        grad_out, w = ts[0], ts[2]
    else:
        w = ts[1] if len(ts) >= 2 else None
        grad_out = next(iter(_tensors(out)), None)
    if w is None or grad_out is None or w.dim() < 3 or grad_out.dim() < 3:
        return None
    n, k = int(w.shape[0]), int(math.prod(w.shape[1:]))
    return (max(1, grad_out.numel() // max(1, grad_out.shape[1])), n, k)


def attention_shape(func, args) -> tuple[int, int, int] | None:
    """(batch × heads, query sequence, head dimension) of a scaled-dot-product kernel's query."""
    ts = _tensors(args)
    q = ts[1] if "backward" in str(func) and len(ts) > 1 else (ts[0] if ts else None)
    if q is None or q.dim() < 3:
        return None
    return (int(math.prod(q.shape[:-2])), int(q.shape[-2]), int(q.shape[-1]))


def attention_kv(func, args, kwargs) -> tuple[int, bool]:
    """(the keys' sequence where it is not the query's, else 0; whether the kernel is causal) of a
    scaled-dot-product kernel, read by its arguments' names (query, key, is_causal), forward or backward."""
    try:
        names = [a.name for a in func._schema.arguments]
    except AttributeError:
        return 0, False
    given = dict(zip(names, args, strict=False)) | dict(kwargs or {})
    q, k = given.get("query"), given.get("key")
    kv = 0
    if isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() >= 2 and k.dim() >= 2 \
            and k.shape[-2] != q.shape[-2]:
        kv = int(k.shape[-2])
    return kv, bool(given.get("is_causal", False))


def grouped_conv_backward_flops(args) -> float:
    """FLOPs of a grouped (depthwise) convolution's backward: each gradient asked for (input, weight) costs what
    the forward does, 2 · N · output pixels · C_out · C_in / groups · kernel elements. torch.utils.flop_counter
    (torch 2.4–2.13) counts the weight gradient of a grouped convolution as a dense one's, `groups` times too many
    (a depthwise 7×7 of 384 channels: 384 ×)."""
    grad_out, _x, w = _tensors(args)[:3]
    mask = args[-1] if isinstance(args[-1], (list, tuple)) else (True, True, True)
    one = 2.0 * math.prod(grad_out.shape) * math.prod(w.shape[1:])
    return one * (bool(mask[0]) + bool(mask[1]))


def _conv_operands(func, args):
    """(input, weight) of a convolution's call, forward (input, weight, ...) or backward (grad_out, input, weight,
    ...); None for what the call does not hold."""
    ts = _tensors(args)
    if "backward" in str(func) and len(ts) >= 3:
        return ts[1], ts[2]
    return (ts[0], ts[1]) if len(ts) >= 2 else (None, None)


def conv_groups(func, args) -> int:
    """The groups of a convolution (forward or backward): input channels over the weight's; 0 for a dense one."""
    x, w = _conv_operands(func, args)
    if x is None or w is None or x.dim() < 3 or w.dim() < 3 or not w.shape[1]:
        return 0
    g = int(x.shape[1]) // int(w.shape[1])
    return g if g > 1 else 0


def conv_images(func, args) -> int:
    """The batch of a plain 2-D convolution's input (forward or backward), or of a pointwise 1-D one (kernel 1,
    stride 1, no padding: the same GEMM over the same positions as a 1×1 2-D one, however they are laid out); 0
    for any other (1-D with a wider kernel, 3-D, dilated, transposed): conv:listed measures none of those."""
    x, w = _conv_operands(func, args)
    if x is None or w is None or _conv_pair(func, args, 2) > 1 or _conv_arg(func, args, 3):
        return 0
    pointwise = x.dim() == 3 and w.dim() == 3 and w.shape[2] == 1 and conv_stride(func, args) == 1 \
        and conv_padding(func, args) == 0
    return int(x.shape[0]) if (x.dim() == 4 and w.dim() == 4) or pointwise else 0


def conv_stride(func, args) -> int:
    """The stride of a convolution (the larger of its two): aten.convolution's fourth argument, its backward's
    fifth."""
    return max(1, _conv_pair(func, args, 0))


def conv_padding(func, args) -> int:
    """The padding of a convolution (the larger of its two): the argument after the stride."""
    return _conv_pair(func, args, 1)


def _conv_pair(func, args, after_stride: int) -> int:
    """The larger of a pair argument (stride: 0, padding: 1, dilation: 2 after the stride); 0 if absent."""
    pair = _conv_arg(func, args, after_stride)
    if isinstance(pair, (list, tuple)) and pair and all(isinstance(x, int) for x in pair):
        return max(pair)
    return 0


def _conv_arg(func, args, after_stride: int):
    """aten.convolution(input, weight, bias, stride, padding, dilation, transposed, ...) and its backward
    (grad_output, input, weight, bias_sizes, stride, ...): the argument `after_stride` places after the stride."""
    at = (4 if "backward" in str(func) else 3) + after_stride
    return args[at] if len(args) > at else None


def conv_kernel(func, args) -> int:
    """Kernel elements per channel of a convolution (forward or backward): 1 for 1×1, 9 for 3×3."""
    w = _conv_operands(func, args)[1]
    return int(math.prod(w.shape[2:])) if w is not None and w.dim() >= 3 else 0


def out_elements(out) -> int:
    """Elements of the largest tensor an operator returns (for an in-place one, the tensor it wrote)."""
    return max((int(t.numel()) for t in _tensors(out)), default=0)


def describe(func, args, kwargs, out, phase: str) -> Item:
    cls = op_class(func)
    first = next(iter(_tensors((args, kwargs))), None)
    flops = op_flops(func, args, kwargs, out) if cls in COMPUTE else 0.0
    grouped = grouped_dims(args) if str(func.overloadpacket) == "aten._grouped_mm" else None
    if grouped is not None:
        g, dims, layout = grouped
        return Item(str(func), cls, dtype_name(first.dtype), phase, flops, op_bytes(func, args, kwargs, out, cls),
                    dims, groups=g, layout=layout, sizes=grouped_sizes(args))
    shape = {"gemm": lambda: gemm_shape(func, args, flops), "conv": lambda: conv_shape(func, args, out),
             "attention": lambda: attention_shape(func, args)}.get(cls, lambda: None)()
    nbytes = _nbytes(first) if cls == "collective" and first is not None else op_bytes(func, args, kwargs, out, cls)
    kv, causal = attention_kv(func, args, kwargs) if cls == "attention" else (0, False)
    return Item(str(func), cls, dtype_name(first.dtype if first is not None else None), phase, flops, nbytes, shape,
                elements=out_elements(out) if cls == "memory" else 0,
                kernel=conv_kernel(func, args) if cls == "conv" else 0,
                groups=conv_groups(func, args) if cls == "conv" else 0,
                images=conv_images(func, args) if cls == "conv" else 0,
                stride=conv_stride(func, args) if cls == "conv" else 0,
                padding=conv_padding(func, args) if cls == "conv" else 0, kv=kv, causal=causal)
