"""gapbench list: workloads with their presets, and suites, one line each."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from gapbench import suites, workloads
from gapbench.cli._output import out, print_json
from gapbench.errors import GapbenchError

HELP = "list workloads, their presets, dtypes and options, and suites"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args) -> int:
    flags = workloads.option_fields()
    rows = []
    for name in workloads.names():
        try:
            w = workloads.get(name)
        except GapbenchError as e:
            rows.append({"name": name, "error": str(e)})
            continue
        rows.append({"name": w.name, "category": w.category, "unit": w.unit, "unit_help": w.unit_help,
                     "description": w.description, "default_preset": w.default_preset, "presets": w.presets,
                     "dtypes": list(w.dtypes) if w.dtypes is not None else None,
                     "options": [flags[n].flag for n in w.options.model_fields if n in flags]})
    suite_rows = [{"name": n, "description": s["description"],
                   "entries": [e if isinstance(e, str) else e for e in s["entries"]]} for n, s in suites.SUITES.items()]
    if args.json:
        print_json({"workloads": rows, "suites": suite_rows})
        return 0
    t = Table(title="workloads", title_justify="left")
    for c in ("workload", "category", "unit", "presets", "description"):
        t.add_column(c)
    for r in rows:
        if "error" in r:
            t.add_row(r["name"], "", "", "", f"[red]{escape(r['error'])}[/]")
            continue
        presets = "\n".join(f"{'*' if p == r['default_preset'] else ' '}{p}: {d}" for p, d in r["presets"].items())
        takes = ([f"dtypes: {', '.join(r['dtypes'])}"] if r["dtypes"] else []) + (
            [f"options: {' '.join(r['options'])}"] if r["options"] else [])
        t.add_row(escape(r["name"]), r["category"], escape(r["unit"]), escape(presets),
                  escape("\n".join([r["description"], *takes])))
    out.print(t)
    s = Table(title="suites", title_justify="left")
    s.add_column("suite")
    s.add_column("runs")
    s.add_column("description")
    for r in suite_rows:
        entries = ", ".join(e if isinstance(e, str) else f"{e.get('cpu') or 'nothing'} (cpu) / {e.get('accelerator') or 'nothing'}" for e in r["entries"])
        s.add_row(r["name"], entries, r["description"])
    out.print(s)
    out.print("* default preset. Run one with: gapbench run --workload NAME:PRESET")
    return 0
