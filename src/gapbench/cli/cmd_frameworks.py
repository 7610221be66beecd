"""gapbench frameworks: which deep-learning frameworks are installed and can compute on the device."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gapbench.cli._args import seconds
from gapbench.cli._output import out, print_json
from gapbench.errors import GapbenchError

HELP = "which DL frameworks (PyTorch, JAX, TensorFlow, Paddle, MindSpore, ONNX Runtime) run on the device"

_COLOR = {"works": "green", "cpu_only": "yellow", "not_installed": "dim", "error": "red"}


def add_arguments(p) -> None:
    p.add_argument("--device", help="device type to probe for: cuda, xpu, npu, mps, cpu (default: the best found)")
    p.add_argument("--json", action="store_true", help="machine-readable output (a list of rows)")
    p.add_argument("--output", "-o", metavar="FILE", help="also write a gapbench results file with this matrix")
    p.add_argument("--timeout", type=seconds, default=None, metavar="S",
                   help="seconds each framework's probe may take (default 120)")
    p.add_argument("--force", action="store_true", help="replace an existing results file at --output")


def main(args) -> int:
    from gapbench import frameworks, results

    device_type = _device_type(args.device)
    if args.output:
        results.check_output(args.output, force=args.force)
    rows = frameworks.probe_all(device_type, timeout_s=args.timeout or frameworks.DEFAULT_TIMEOUT_S)
    _show(rows, device_type, args.json)  # first: a file that cannot be written loses nothing that was probed
    if args.output:
        _write(args.output, args.device, device_type, rows)
        if not args.json:
            out.print(f"wrote {args.output}", markup=False)
    return 0


def _show(rows: list[dict], device_type: str, as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    t = Table(title=f"frameworks on {device_type}", title_justify="left")
    for col in ("framework", "version", "status", "device", "reason"):
        t.add_column(col)
    for r in rows:  # Text cells: what a probe printed is never read as markup
        t.add_row(Text(str(r["framework"])), Text(str(r["version"] or "-")),
                  Text(str(r["status"]), style=_COLOR.get(r["status"], "red")), Text(str(r["device"] or "-")),
                  Text(str(r["reason"] or "")))
    out.print(t)


def _device_type(spec: str | None) -> str:
    from gapbench import devices  # imports torch: only when the verb runs

    if not spec or spec == "auto":
        return devices.available_types()[0]
    kind = spec.strip().split(":")[0]
    if kind not in devices.kinds():
        raise GapbenchError(f"unknown device {spec!r}; expected one of {', '.join(devices.kinds())}")
    return kind


def _write(path: str, spec: str | None, device_type: str, rows: list[dict]) -> None:
    from gapbench import devices, results

    try:
        ident = devices.resolve(spec or device_type).identity()
    except GapbenchError as e:  # probing for a device torch cannot see is still a useful answer
        ident = {"type": device_type, "note": str(e)}
    rs = results.ResultSet(host=devices.host_identity(), device=ident, measurements=[], frameworks=rows,
                           suite="frameworks", complete=True, finished_at=results.now_iso(),
                           options={"verb": "frameworks", "device_type": device_type})
    results.save(rs, path)  # a failed write is one line (results.files.OutputError)
