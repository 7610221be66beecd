"""gapbench env: the device identity and software stack, as gapbench sees it."""

from __future__ import annotations

from rich.table import Table

from gapbench.cli._output import out, print_json

HELP = "show the device identity and software stack as gapbench sees it"


def add_arguments(p) -> None:
    p.add_argument("--device", help="cuda, xpu, npu, mps, cpu (default: the best device found)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


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
            if isinstance(v, dict):
                v = "\n".join(f"{kk}={vv}" for kk, vv in v.items()) or "-"
            elif isinstance(v, list):
                v = " ".join(map(str, v)) or "-"
            t.add_row(k, str(v))
        out.print(t)
    out.print(f"available device types: {', '.join(data['available'])}")
    return 0
