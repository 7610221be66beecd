"""gapbench specs: the known accelerators, their dense peaks and prices, and the published references."""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text

from gapbench import specs
from gapbench.cli._output import out, print_json
from gapbench.report.kit import fmt_num

HELP = "known accelerators with dense peak TFLOPS per dtype, memory, power, price; published references"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--refs", action="store_true", help="show the published reference results too")
    p.add_argument("--no-cpu", action="store_true", help="skip computing this machine's CPU peak")


def _this_cpu() -> specs.Spec | None:
    from gapbench import devices

    facts = devices.host_identity()  # the verb reads this machine; specs only computes from what it is given
    return specs.cpu_spec(specs.cpu_identity(facts))


def _products() -> list:
    """The spec rows of products: the test accelerator's made-up row is left out."""
    return [s for s in specs.load_specs() if s.type != "test"]


def main(args) -> int:
    rows = _products()
    cpu = None if args.no_cpu else _this_cpu()
    refs = specs.load_references()
    gaps = specs.load_published_gaps()
    if args.json:
        data = {"accelerators": [s.to_dict() for s in rows], "this_cpu": cpu.to_dict() if cpu else None,
                "references": [r.__dict__ for r in refs], "published_gaps": [g.__dict__ for g in gaps],
                "dense": True, "units": {"tflops": "TFLOPS (int8: TOPS), dense", "memory_gb": "GB",
                                         "bandwidth_tbs": "TB/s", "tdp_w": "W", "price_usd_per_hour": "USD"}}
        print_json(data)
        return 0
    t = Table(title="accelerators (dense peaks, per torch device; int8 in TOPS)", title_justify="left")
    for c in ("key", "name", *specs.DTYPES, "memory GB", "TB/s", "TDP W", "$/h", "conf."):
        t.add_column(c, justify="right" if c not in ("key", "name", "conf.") else "left")
    for s in rows + ([cpu] if cpu else []):
        t.add_row(Text(s.key), Text(s.name), *[fmt_num(s.tflops.get(d), 5) if s.tflops.get(d) else "—" for d in specs.DTYPES],
                  fmt_num(s.memory_gb), fmt_num(s.bandwidth_tbs), fmt_num(s.tdp_w),
                  f"{s.price_usd_per_hour:.2f}" if s.price_usd_per_hour else "—",
                  "estimate" if s.estimate else s.confidence)
    out.print(t)
    if cpu:
        out.print(f"this machine's CPU: {cpu.notes}", markup=False)
    out.print("sources: `gapbench specs --json`; prices are indicative (see price_date, price_source); "
              "override with `compare --price NAME=USD`")
    if args.refs:
        r = Table(title="published references (not measured by gapbench)", title_justify="left")
        for c in ("--ref", "workload", "variant", "value", "unit", "date", "note"):
            r.add_column(c)
        for x in refs:
            r.add_row(*[Text(str(c)) for c in (x.platform, x.workload, json.dumps(x.variant), fmt_num(x.value),
                                               x.unit + (f" at {fmt_num(x.interactivity)} tokens/s/user"
                                                         if x.interactivity else ""), x.date, x.note)])
        out.print(r)
        g = Table(title="published gaps (as reported, not measured by gapbench)", title_justify="left")
        for c in ("platform", "baseline", "row", "gap", "source"):
            g.add_column(c)
        for x in gaps:
            g.add_row(x.platform, x.baseline, x.label, f"{x.gap_pct:+.0f}%", x.source)
        out.print(g)
    return 0
