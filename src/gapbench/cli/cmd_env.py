"""gapbench env: the device identity and software stack, as gapbench sees it."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gapbench.cli._output import out, print_json

HELP = "show the device identity and software stack as gapbench sees it"


def add_arguments(p) -> None:
    p.add_argument("--device", help="cuda, xpu, npu, mps, cpu (default: the best device found)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _size(n: int) -> str:
    unit, f = next(((u, f) for u, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if n >= f), ("B", 1))
    return f"{n / f:.3g} {unit}"


def readable(key: str, v) -> str:
    """A recorded value as a person reads it: sizes in units, lists and tables one item a line, a string with its
    surrounding whitespace and tabs gone ('at::get_num_threads() : 2', not '\\tat::get_num_threads() : 2')."""
    if isinstance(v, dict):
        return "\n".join(f"{kk}: {readable(str(kk), vv)}".replace("\n", "; ") for kk, vv in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        items = [readable(key, x) for x in v]
        if all(isinstance(x, str) and " " not in x.strip() for x in v):
            return " ".join(items) or "-"
        return "\n".join(items) or "-"
    if key.endswith("_bytes") and isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return f"{_size(v)} ({v:,} bytes)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    return " ".join(str(v).split())


def main(args) -> int:
    from gapbench import devices

    dev = devices.resolve(args.device)
    data = {"available": devices.available_types(), "host": devices.host_identity(), "device": dev.identity()}
    if args.json:
        print_json(data)
        return 0
    for title, section in (("host", data["host"]), (f"device {dev}", data["device"])):
        t = Table(title=title, title_justify="left", show_header=False)
        t.add_column("field", style="bold")
        t.add_column("value")
        for k, v in section.items():
            t.add_row(Text(k), Text(readable(k, v)))
        out.print(t)
    out.print(f"available device types: {', '.join(data['available'])}")
    return 0
