"""Where a development model's predicted step and its measured one part: each ATen operator's price (what
gapbench.assess.speed sums: its calls' work at this side's rates, plus the per-operator time every call pays) set
beside its time in the step, each call timed under a dispatch mode, operator by operator.

    python benchmarks/assess_per_op.py --out results/cpu-xeon-2core-assess-r14-held-aside --model bigbird --dtype bf16

The step is the one `benchmarks/assess_unseen.py` measures (benchmarks/assess_models.py), traced on real tensors and
priced at one side of a folder it wrote (--threads, --dtype); then run --steps times more under the timing mode, each
operator's time being its calls' total in the median step. The process runs with the allocator settings a
workload's worker has (gapbench.engine.jobs.STEADY_MALLOC: it starts itself again with them where they are
missing), so that a large tensor's allocation costs here what it costs in the measured row. The timing mode adds its
own cost to every call, outside what it times: the step under it is longer than the step alone, both are shown;
inside the window it adds what a call that does no work takes, printed and taken off each class's time beside it.
Held-aside models are refused (exit 2): they are scored once, never looked at while the model is worked on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks import assess_models  # noqa: E402
from benchmarks import assess_unseen as unseen  # noqa: E402

from gapbench.engine.jobs import STEADY_MALLOC  # noqa: E402

OPTIMIZER = "optimizer step"  # its calls, timed and priced as one


def packet_of(item) -> str:
    return OPTIMIZER if item.phase == "optimizer" else item.packet


def priced(work, pr) -> tuple[dict[str, dict], float]:
    """{operator: {class, calls, seconds (work + per-operator time)}}, and the per-operator time."""
    from gapbench.assess.speed import priced_items

    items, per_op, missing = priced_items(work, pr)
    if missing:
        raise unseen.BadModels(f"assess_per_op: {'; '.join(missing)}")
    out: dict[str, dict] = defaultdict(lambda: {"class": "", "calls": 0, "seconds": 0.0})
    for it, cls, seconds in items:
        row = out[packet_of(it)]
        row["class"], row["calls"] = cls, row["calls"] + it.count
        row["seconds"] += seconds + it.count * per_op * (cls != "optimizer")
    return dict(out), per_op


def timing_mode():
    """A dispatch mode that times each call: its total by operator (an optimizer step's calls as one: the price takes
    the step whole) and every call's window."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Timing(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.spent: dict[str, float] = defaultdict(float)
            self.calls: dict[str, int] = defaultdict(int)
            self.windows: list[float] = []
            self.in_step = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t0 = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            window = time.perf_counter() - t0
            name = OPTIMIZER if self.in_step else str(func.overloadpacket).removeprefix("aten.")
            self.spent[name] += window
            self.calls[name] += 1
            self.windows.append(window)
            return out

    return Timing()


def timed(step, steps: int) -> tuple[dict[str, dict], float, float]:
    """({operator: {calls, seconds}} of the median step, the median step alone, the median step under the mode)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    alone, under, runs = [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        alone.append(time.perf_counter() - t0)
        mode = timing_mode()
        hooks = [register_optimizer_step_pre_hook(lambda *_, m=mode: setattr(m, "in_step", True)),
                 register_optimizer_step_post_hook(lambda *_, m=mode: setattr(m, "in_step", False))]
        try:
            with mode:
                t0 = time.perf_counter()
                step()
                under.append(time.perf_counter() - t0)
        finally:
            for h in hooks:
                h.remove()
        runs.append(mode)
    median = sorted(runs, key=lambda m: sum(m.spent.values()))[len(runs) // 2]
    return ({k: {"calls": median.calls[k], "seconds": v} for k, v in median.spent.items()},
            statistics.median(alone), statistics.median(under))


def mode_cost(calls: int = 2000) -> float:
    """Seconds of the timing mode's window around an operator that does no work (`alias` of one element): what the
    mode itself adds inside each call's window at most (a call made from Python through the dispatcher), where the
    step alone calls many operators from C++ (autograd's backward) without it."""
    import torch

    x = torch.zeros(1)
    with timing_mode() as mode:
        for _ in range(calls):
            torch.ops.aten.alias.default(x)
    return statistics.median(mode.windows)


def table(price: dict[str, dict], time_: dict[str, dict], top: int) -> list[str]:
    names = sorted(set(price) | set(time_), key=lambda k: -abs(time_.get(k, {}).get("seconds", 0.0)
                                                                - price.get(k, {}).get("seconds", 0.0)))
    lines = ["| operator | priced as | calls traced / timed | priced ms | timed ms | timed − priced ms |",
             "|---|---|---:|---:|---:|---:|"]
    for k in names[:top]:
        p, t = price.get(k, {}), time_.get(k, {})
        ps, ts = p.get("seconds", 0.0) * 1e3, t.get("seconds", 0.0) * 1e3
        lines.append(f"| {k} | {p.get('class', '—')} | {p.get('calls', 0)} / {t.get('calls', 0)} | {ps:.2f} | "
                     f"{ts:.2f} | {ts - ps:+.2f} |")
    return lines


def by_class(price: dict[str, dict], time_: dict[str, dict], cost: float) -> list[str]:
    """Both sums per class the price puts each operator in (an operator the trace did not price: 'not priced'), and
    the timed sum less `cost` seconds a call (the window of a call that does no work: a lower bound of the time)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for k in set(price) | set(time_):
        cls = price.get(k, {}).get("class") or "not priced"
        sums[cls][0] += price.get(k, {}).get("seconds", 0.0)
        sums[cls][1] += time_.get(k, {}).get("seconds", 0.0)
        sums[cls][2] += time_.get(k, {}).get("calls", 0)
    lines = ["| class | priced ms | timed ms | timed less an empty call's window ms |", "|---|---:|---:|---:|"]
    for cls, (p, t, n) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {cls} | {p * 1e3:.1f} | {t * 1e3:.1f} | {max(0.0, t - n * cost) * 1e3:.1f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="a folder benchmarks/assess_unseen.py measured into")
    ap.add_argument("--model", required=True, help="a development model of benchmarks/data/assess_models.toml")
    ap.add_argument("--dtype", default="fp32", choices=tuple(assess_models.DTYPES))
    ap.add_argument("--threads", type=int, default=1, choices=unseen.THREADS)
    ap.add_argument("--steps", type=int, default=3, help="steps timed (default 3; the median one is shown)")
    ap.add_argument("--scale", type=float, default=1.0, help="build the model smaller (< 1: tests)")
    ap.add_argument("--top", type=int, default=30, help="operators shown, largest difference first")
    args = ap.parse_args(argv)
    if any(os.environ.get(k) != v for k, v in STEADY_MALLOC.items()):  # glibc reads them when the process starts
        os.execve(sys.executable, [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)],
                  {**os.environ, **STEADY_MALLOC})
    try:
        unseen.chosen("development", [args.model])
        if not (args.out / unseen.rates_file(args.threads)).is_file():
            raise unseen.BadModels(f"assess_per_op: {args.out} has no {unseen.rates_file(args.threads)}")
        if args.steps < 1 or args.top < 1 or not 0 < args.scale <= 1:
            raise unseen.BadModels("assess_per_op: --steps and --top must be 1 or more, --scale in (0, 1]")
    except unseen.BadModels as e:
        print(str(e).replace("assess_unseen:", "assess_per_op:", 1), file=sys.stderr)
        return 2
    return report(args)


def report(args) -> int:
    import torch

    from gapbench.assess.rates import platform_rates
    from gapbench.assess.work import WorkRecorder

    torch.set_num_threads(args.threads)
    step = assess_models.step(args.model, args.dtype, scale=args.scale)
    step()  # the optimizer's state exists from here on, as in every measured step after the first
    rec = WorkRecorder()
    with rec:
        step()
    work = rec.work(f"{unseen.WORKLOAD}:{args.model}", fake=False)
    try:
        price, per_op = priced(work, platform_rates(unseen.side(args.out, args.threads, args.dtype)))
    except unseen.BadModels as e:
        print(e, file=sys.stderr)
        return 2
    time_, alone, under = timed(step, args.steps)
    cost = mode_cost()
    total_p = sum(r["seconds"] for r in price.values())
    total_t = sum(r["seconds"] for r in time_.values())
    calls = sum(r["calls"] for r in time_.values())
    print(f"{args.model} {args.dtype}, {args.threads} thread(s), rates of {args.out}: priced {total_p * 1e3:.1f} ms "
          f"(per-operator time {per_op * 1e6:.2f} µs); timed: step alone {alone * 1e3:.1f} ms, under the timing "
          f"mode {under * 1e3:.1f} ms, its operators {total_t * 1e3:.1f} ms ({calls} calls; the window of a call "
          f"that does no work {cost * 1e6:.2f} µs, {calls * cost * 1e3:.1f} ms over the calls)\n")
    print("\n".join(by_class(price, time_, cost)), end="\n\n")
    print("\n".join(table(price, time_, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
