"""gapbench frameworks: which deep-learning frameworks are installed and can compute on the device."""

from __future__ import annotations

import json

from rich.table import Table

from gapbench.cli._output import out
from gapbench.errors import GapbenchError

HELP = "which DL frameworks (PyTorch, JAX, TensorFlow, Paddle, MindSpore, ONNX Runtime) run on the device"

_COLOR = {"works": "green", "cpu_only": "yellow", "not_installed": "dim", "error": "red"}


def add_arguments(p) -> None:
    p.add_argument("--device", help="device type to probe for: cuda, xpu, npu, mps, cpu (default: the best found)")
    p.add_argument("--json", action="store_true", help="machine-readable output (a list of rows)")
    p.add_argument("--output", "-o", metavar="FILE", help="also write a gapbench results file with this matrix")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds each framework's probe may take (default 120)")


def main(args) -> int:
    from gapbench import frameworks

    device_type = _device_type(args.device)
    if args.timeout is not None and args.timeout <= 0:
        raise GapbenchError("--timeout must be positive")
    rows = frameworks.probe_all(device_type, timeout_s=args.timeout or frameworks.DEFAULT_TIMEOUT_S)
    if args.output:
        _write(args.output, args.device, device_type, rows)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    t = Table(title=f"frameworks on {device_type}", title_justify="left")
    for col in ("framework", "version", "status", "device", "reason"):
        t.add_column(col)
    for r in rows:
        status = f"[{_COLOR.get(r['status'], 'red')}]{r['status']}[/]"
        t.add_row(r["framework"], r["version"] or "-", status, r["device"] or "-", r["reason"] or "")
    out.print(t)
    if args.output:
        out.print(f"wrote {args.output}")
    return 0


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
    try:
        results.save(rs, path)
    except OSError as e:
        raise GapbenchError(f"cannot write {path}: {e}") from None
