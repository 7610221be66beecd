"""One optimizer step over a whole parameter set: what a training step spends after its backward pass.

An Adam-family step reads and writes every parameter, its gradient and two moments, in one short loop of in-place
operators per parameter (`lerp_`, `mul_`, `addcmul_`, `sqrt`, `addcdiv_`, …; on an accelerator the `_foreach_`
forms over all of them). Priced operator by operator at rows of one tensor the step comes out wrong: over a model's
millions of parameters the moments do not stay in any cache, and on a CPU a bf16 update converts every element to
fp32 and back in each operator (a 12 M-parameter model's AdamW step took 76 ms in bf16 against 45 ms in fp32 on a
2-core Xeon, while single-operator rows had bf16 the faster). So the step is measured whole, in parameter elements
updated per second, at parameter sets that look like models':

  tiny    four 4096-element tensors and four 64-element ones (tests)
  quick   three sets of 24 weight matrices and 48 vectors (a transformer's linear layers with their biases and
          norms): 1.6 M, 6.3 M and 25 M elements
  listed  the sets of --param-sets, each NUMEL*COUNT[+NUMEL*COUNT…] (`gapbench assess` names a traced step's own)

The optimizer as torch builds it by default for the device (on a CPU one tensor at a time, on CUDA, ROCm and XPU the
`_foreach_` kernels), with weight decay, every parameter with a gradient. Each variant checks one step of its
optimizer on a small tensor against the same step in float64 on the CPU.
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.errors import GapbenchError
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error
from gapbench.workloads.micro.options import OPTIMIZERS, OptimizerOptions, param_set_spec

SETS = {"tiny": ([(4096, 4), (64, 4)],),
        "quick": ([(65536, 24), (256, 48)], [(262144, 24), (1024, 48)], [(1048576, 24), (4096, 48)])}
LR, WEIGHT_DECAY = 1e-3, 0.01
STATES = {"adamw": 2, "adam": 2, "sgd": 1}  # tensors of state per parameter (moments; sgd: its momentum buffer)
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-3}  # of max |error| over max |reference|
CHECK_ELEMENTS = 4096
CHECK_LR = 0.1  # the check's step: large enough that a wrong update shows above bf16's rounding
LISTED_NEEDS = ("the listed preset measures the parameter sets of --param-sets NUMEL*COUNT[+NUMEL*COUNT][,...]; none "
                "were given (`gapbench assess` names a traced step's own)")


def make_optimizer(name: str, params: list[torch.Tensor], lr: float = LR) -> torch.optim.Optimizer:
    """The optimizer as a training script builds it: torch's defaults for the device, weight decay, momentum for
    SGD."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=WEIGHT_DECAY)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=WEIGHT_DECAY)
    raise GapbenchError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")


class Optimizer(OperatorWorkload):
    name = "optimizer"
    unit = "Gelem/s"
    scale = 1e-9
    unit_help = "10^9 parameter elements updated per second by one whole optimizer step (moments, weight decay)"
    description = "one optimizer step (AdamW, Adam, SGD) over a whole parameter set per dtype, as a training step runs it"
    presets = {"tiny": "AdamW over 4×4096 + 4×64 elements (tests)",
               "quick": "AdamW over sets of 24 matrices and 48 vectors: 1.6 M, 6.3 M and 25 M elements",
               "listed": "the parameter sets of --param-sets per dtype (a model step's own: `gapbench assess` names "
                         "them)"}
    options = OptimizerOptions

    def check(self, options, preset: str) -> None:
        if preset == "listed" and not options.param_sets:
            raise ValueError(LISTED_NEEDS)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        opts = self.opts(ctx)
        if preset == "listed":
            sets = [tuple(map(tuple, s)) for s in opts.param_sets or ()]
            if not sets:
                raise GapbenchError(LISTED_NEEDS)
        elif preset in SETS:
            sets = [tuple(s) for s in SETS[preset]]
        else:
            raise ValueError(f"unknown preset {preset!r}")
        name = opts.optimizer
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for s in dict.fromkeys(sets):
                elements = sum(n * c for n, c in s)
                # each element: the parameter and its gradient read, the states read and written, the parameter
                # written (no write-allocate)
                nbytes = float(elements * size * (3 + 2 * STATES[name]))
                out.append(Variant({"optimizer": name, "dtype": d, "params": param_set_spec(s),
                                    "elements": elements, "tensors": sum(c for _, c in s)}, bytes=nbytes))
        return out

    def work(self, variant: Variant) -> float:
        return float(variant.params["elements"])

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        dtype, dev = ctx.device.torch_dtype(p["dtype"]), ctx.device.torch_device
        sizes = [(n, c) for n, c in (tuple(map(int, part.split("*"))) for part in p["params"].split("+"))]
        g = torch.Generator().manual_seed(0)
        params = []
        for n, c in sizes:
            for _ in range(c):
                t = (torch.randn(n, generator=g) * 0.02).to(dev, dtype).requires_grad_(True)
                t.grad = (torch.randn(n, generator=g) * 1e-3).to(dev, dtype)
                params.append(t)
        opt = make_optimizer(p["optimizer"], params)
        return Op(opt.step, lambda: check_step(p["optimizer"], dtype, dev, TOLERANCE.get(p["dtype"], 2e-2)),
                  f"{p['dtype']} {p['optimizer']} step")


def check_step(name: str, dtype: torch.dtype, dev, tol: float) -> str:
    """'' when two steps of the optimizer on the device at `dtype` land where the same steps in float64 on the CPU
    do, else what is wrong."""
    g = torch.Generator().manual_seed(1)
    p64 = torch.randn(CHECK_ELEMENTS, generator=g, dtype=torch.float64) * 0.1
    g64 = torch.randn(CHECK_ELEMENTS, generator=g, dtype=torch.float64)
    got = p64.to(dev, dtype).requires_grad_(True)
    ref = p64.clone().requires_grad_(True)
    opts = [make_optimizer(name, [got], CHECK_LR), make_optimizer(name, [ref], CHECK_LR)]
    for _ in range(2):
        got.grad, ref.grad = g64.to(dev, dtype), g64.clone()
        for o in opts:
            o.step()
    return relative_error(got.detach(), ref.detach(), tol, f"{name} step")
