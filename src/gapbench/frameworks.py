"""Framework support matrix: which deep-learning frameworks are installed and can compute on the device.

Each framework is probed by one small matrix multiply in a supervised child process (a broken or hanging
framework cannot crash or hang gapbench), and its result is checked against an exact reference in this
process. How each framework names the device comes from the device's backend (`Backend.frameworks`).
Nothing is ever installed. Each row: framework, version, status, device seen, reason.

Statuses: works (ran on the asked device type and was right), cpu_only (installed and right, but only on the
CPU), not_installed, error (import failure, crash, timeout, or a wrong result; the reason says which).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from dataclasses import dataclass
from importlib import metadata

STATUSES = ("works", "cpu_only", "not_installed", "error")
DEFAULT_TIMEOUT_S = 120.0

# the probe's inputs: small integers, so every product and sum is exact in fp32 (and tf32/bf16 inputs)
M, K, N = 48, 64, 32


def probe_inputs() -> tuple[list[list[float]], list[list[float]]]:
    a = [[float((i * 7 + j * 3) % 5 - 2) for j in range(K)] for i in range(M)]
    b = [[float((i * 5 + j * 11 + 1) % 5 - 2) for j in range(N)] for i in range(K)]
    return a, b


def check_matmul(result, a: list[list[float]], b: list[list[float]], tol: float = 1e-3) -> str | None:
    """Why `result` is not a @ b (exact integer reference), or None when it is."""
    try:
        rows = [[float(x) for x in row] for row in result]
    except (TypeError, ValueError):
        return "result is not a matrix of numbers"
    if len(rows) != len(a) or any(len(r) != len(b[0]) for r in rows):
        return f"result shape {len(rows)}×{len(rows[0]) if rows else 0}, expected {len(a)}×{len(b[0])}"
    for i, row in enumerate(rows):
        for j, got in enumerate(row):
            ref = sum(a[i][k] * b[k][j] for k in range(len(b)))
            if not abs(got - ref) <= tol:  # NaN fails too
                return f"wrong result: element ({i},{j}) is {got:g}, expected {ref:g}"
    return None


@dataclass(frozen=True)
class Framework:
    """A framework to probe: its display name, the module whose presence means installed, and the probe body.

    The body is Python source defining `matmul(a, b, want) -> dict`, where `want` holds the device's torch
    type, whether it is an accelerator, and its names in each framework (gapbench.devices.base.FrameworkNames);
    it returns version, device (what it ran on), on_device (True when on the asked device) and result
    (nested lists), and may add note (why it fell back to the CPU) and providers.
    """

    name: str
    module: str
    body: str


_MAIN = textwrap.dedent('''
    import json, os, sys, traceback
    req = json.loads(sys.stdin.read())
    try:
        out = matmul(req["a"], req["b"], req["want"])
    except BaseException as e:
        last = " ".join(str(e).split())[:300]
        out = {"error": f"{e.__class__.__name__}: {last}"}
    fd = os.open(os.environ["GAPBENCH_EVENTS"], os.O_WRONLY | os.O_APPEND)
    os.write(fd, (json.dumps({"event": "result", "result": out}) + "\\n").encode())
''')

_PYTORCH = '''
def matmul(a, b, want):
    import importlib
    import torch
    for name in want["torch_modules"]:
        importlib.import_module(name)
    kind = want["torch_type"]
    try:
        dev = torch.device(kind)
        torch.empty(1, device=dev)
        avail = True
    except Exception:
        dev, avail = torch.device("cpu"), False
    ta = torch.tensor(a, dtype=torch.float32, device=dev)
    tb = torch.tensor(b, dtype=torch.float32, device=dev)
    c = (ta @ tb).cpu().tolist()
    name = str(dev)
    mod = getattr(torch, kind, None)
    if avail and want["accelerator"] and hasattr(mod, "get_device_name"):
        name += " (" + mod.get_device_name(0) + ")"
    return {"version": torch.__version__, "device": name, "on_device": avail and want["accelerator"],
            "result": c, "note": "" if avail else "torch sees no " + want["device_type"] + " device"}
'''

_JAX = '''
def matmul(a, b, want):
    import jax
    import jax.numpy as jnp
    import numpy as np
    dev = None
    for p in want["jax"] if want["accelerator"] else ():
        try:
            dev = jax.devices(p)[0]
            break
        except RuntimeError:  # "Unknown backend"
            continue
    on = dev is not None
    if dev is None:
        dev = jax.devices("cpu")[0]
    c = jnp.matmul(jax.device_put(np.asarray(a, np.float32), dev), jax.device_put(np.asarray(b, np.float32), dev))
    return {"version": jax.__version__, "device": f"{dev.platform}:{dev.id} ({getattr(dev, 'device_kind', '')})",
            "on_device": on, "result": np.asarray(c).tolist(),
            "note": "" if on else "no JAX backend for " + want["device_type"] + "; backends: "
                    + ", ".join(sorted({d.platform for d in jax.devices()}))}
'''

_TENSORFLOW = '''
def matmul(a, b, want):
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    kinds = want["tensorflow"] if want["accelerator"] else ()
    kind = next((k for k in kinds if tf.config.list_physical_devices(k)), None)
    target = f"/{kind}:0" if kind else "/CPU:0"
    with tf.device(target):
        c = tf.matmul(tf.constant(a, dtype=tf.float32), tf.constant(b, dtype=tf.float32))
    return {"version": tf.__version__, "device": c.device, "on_device": kind is not None, "result": c.numpy().tolist(),
            "note": "" if kind else "TensorFlow lists no " + ("/".join(kinds) or want["device_type"]) + " device"}
'''

_PADDLE = '''
def matmul(a, b, want):
    import paddle
    dev = paddle.device
    target = None
    names = want["paddle"] if want["accelerator"] else ()
    if "gpu" in names and (dev.is_compiled_with_cuda() or dev.is_compiled_with_rocm()) and dev.cuda.device_count() > 0:
        target = "gpu:0"
    if target is None and names:
        customs = dev.get_all_custom_device_type() if hasattr(dev, "get_all_custom_device_type") else []
        found = [c for c in customs if c in names]
        if found:
            target = found[0] + ":0"
        elif want["paddle_xpu_build"] and dev.is_compiled_with_xpu():
            target = "xpu:0"
    paddle.set_device(target or "cpu")
    c = paddle.matmul(paddle.to_tensor(a, dtype="float32"), paddle.to_tensor(b, dtype="float32"))
    return {"version": paddle.__version__, "device": str(c.place), "on_device": target is not None,
            "result": c.numpy().tolist(),
            "note": "" if target else "this Paddle build has no " + want["device_type"] + " device"}
'''

_MINDSPORE = '''
def matmul(a, b, want):
    import mindspore as ms
    import numpy as np
    wanted = want["mindspore"] if want["accelerator"] else "CPU"
    note, target = "", "CPU"
    if wanted and wanted != "CPU":
        try:
            if hasattr(ms, "set_device"):
                ms.set_device(wanted)
            else:
                ms.set_context(device_target=wanted)
            target = wanted
        except Exception as e:
            note = f"MindSpore cannot use {wanted}: {' '.join(str(e).split())[:150]}"
    elif not wanted:
        note = "MindSpore has no " + want["device_type"] + " backend"
    if target == "CPU":
        if hasattr(ms, "set_device"):
            ms.set_device("CPU")
        else:
            ms.set_context(device_target="CPU")
    c = ms.ops.matmul(ms.Tensor(np.asarray(a, np.float32)), ms.Tensor(np.asarray(b, np.float32))).asnumpy()
    return {"version": ms.__version__, "device": target, "on_device": target != "CPU", "result": c.tolist(),
            "note": note}
'''

_ONNXRUNTIME = '''
def _onnx_matmul_model(m, k, n):
    """A float32 MatMul model (A: m×k, B: k×n) as ONNX protobuf bytes, written by hand: onnx is not needed."""
    def varint(v):
        out = bytearray()
        while True:
            byte = v & 0x7F
            v >>= 7
            out.append(byte | (0x80 if v else 0))
            if not v:
                return bytes(out)
    def f_int(field, v):
        return varint(field << 3) + varint(v)
    def f_bytes(field, data):
        if isinstance(data, str):
            data = data.encode()
        return varint(field << 3 | 2) + varint(len(data)) + data
    def value_info(name, dims):
        shape = b"".join(f_bytes(1, f_int(1, d)) for d in dims)        # TensorShapeProto.dim{dim_value}
        tensor = f_int(1, 1) + f_bytes(2, shape)                          # elem_type FLOAT, shape
        return f_bytes(1, name) + f_bytes(2, f_bytes(1, tensor))          # name, type{tensor_type}
    node = f_bytes(1, "A") + f_bytes(1, "B") + f_bytes(2, "C") + f_bytes(3, "mm") + f_bytes(4, "MatMul")
    graph = (f_bytes(1, node) + f_bytes(2, "gapbench_probe") + f_bytes(11, value_info("A", (m, k)))
             + f_bytes(11, value_info("B", (k, n))) + f_bytes(12, value_info("C", (m, n))))
    opset = f_bytes(1, "") + f_int(2, 13)
    return f_int(1, 7) + f_bytes(2, "gapbench") + f_bytes(7, graph) + f_bytes(8, opset)

def matmul(a, b, want):
    import numpy as np
    import onnxruntime as ort
    available = ort.get_available_providers()
    wanted = tuple(want["onnxruntime"]) if want["accelerator"] else ()
    model = _onnx_matmul_model(len(a), len(b), len(b[0]))
    feeds = {"A": np.asarray(a, np.float32), "B": np.asarray(b, np.float32)}
    note = ""
    for p in [p for p in wanted if p in available] + ["CPUExecutionProvider"]:
        try:
            sess = ort.InferenceSession(model, providers=[p, "CPUExecutionProvider"])
        except Exception as e:
            note += f"{p} failed: {' '.join(str(e).split())[:120]}; "
            continue
        used = sess.get_providers()[0]
        if used != p:  # onnxruntime falls back to the CPU silently when a provider cannot load
            note += f"{p} is listed but did not load; "
            continue
        c = sess.run(["C"], feeds)[0]
        on = used != "CPUExecutionProvider"
        if not on and not note and want["accelerator"]:
            note = "no execution provider for " + want["device_type"] + " among " + ", ".join(available)
        return {"version": ort.__version__, "device": used, "on_device": on, "result": c.tolist(),
                "note": note.rstrip("; "), "providers": available}
    raise RuntimeError(note or "no execution provider could run the model")
'''

FRAMEWORKS: tuple[Framework, ...] = (
    Framework("PyTorch", "torch", _PYTORCH),
    Framework("JAX", "jax", _JAX),
    Framework("TensorFlow", "tensorflow", _TENSORFLOW),
    Framework("PaddlePaddle", "paddle", _PADDLE),
    Framework("MindSpore", "mindspore", _MINDSPORE),
    Framework("ONNX Runtime", "onnxruntime", _ONNXRUNTIME),
)


def installed_version(module: str) -> str | None:
    """The version of the distribution that provides `module`, read without importing it."""
    try:
        dists = metadata.packages_distributions().get(module, [])
    except Exception:
        dists = []
    for d in list(dists) + [module]:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def device_names(device: str) -> dict:
    """What a probe needs to know of the device ('cuda', 'xpu:1', …): its torch type, whether it is an
    accelerator, and how each framework names it."""
    from dataclasses import asdict

    from gapbench import devices

    kind = str(device).split(":")[0]
    backend = next((b for b in devices.backends() if kind == b.device_type or kind in b.aliases), None)
    if backend is None:
        backend = devices.by_name("cpu")
    try:
        backend = devices.resolve(device).backend
    except Exception:  # a device this host lacks: ask with its names anyway, the probe says what it finds
        pass
    return {"device_type": backend.device_type, "torch_type": backend.torch_type,
            "accelerator": backend.is_accelerator, **asdict(backend.frameworks)}


def probe(fw: Framework, device: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """Probe one framework on a device ('cuda', 'xpu', 'npu', 'mps', 'cpu'); never raises."""
    from gapbench.engine.supervise import Child

    row = {"framework": fw.name, "version": None, "status": "error", "device": None, "reason": ""}
    try:
        present = importlib.util.find_spec(fw.module) is not None
    except (ImportError, ValueError):
        present = False
    if not present:
        row.update(status="not_installed", reason=f"python module {fw.module!r} not found")
        return row
    row["version"] = installed_version(fw.module)
    a, b = probe_inputs()
    want = device_names(device)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    try:
        child = Child([sys.executable, "-c", fw.body + _MAIN], payload=json.dumps({"a": a, "b": b, "want": want}),
                      env=env, what="probe")
    except OSError as e:
        row["reason"] = f"probe could not start: {e}"
        return row
    try:
        out = child.follow(timeout_s)
    finally:
        child.close()
    if out.timed_out:
        row["reason"] = f"probe timed out after {timeout_s:g} s"
        return row
    payload = next((ev.get("result") for ev in out.events if ev.get("event") == "result"), None)
    if not isinstance(payload, dict):
        tail = [ln.strip() for ln in out.log.strip().splitlines() if ln.strip()]
        row["reason"] = f"probe crashed (exit code {out.returncode})" + (f": {tail[-1][:200]}" if tail else "")
        return row
    if "error" in payload:
        row["reason"] = str(payload["error"])
        return row
    row["version"] = payload.get("version") or row["version"]
    row["device"] = payload.get("device")
    if payload.get("providers"):
        row["providers"] = list(payload["providers"])
    wrong = check_matmul(payload.get("result"), a, b)
    if wrong:
        row["reason"] = f"matmul on {row['device']}: {wrong}"
        return row
    if not want["accelerator"] or payload.get("on_device"):
        row.update(status="works", reason="")
    else:
        row.update(status="cpu_only", reason=payload.get("note") or f"runs on the CPU only, not on {want['device_type']}")
    return row


def probe_all(device: str, timeout_s: float = DEFAULT_TIMEOUT_S,
              frameworks: tuple[Framework, ...] = FRAMEWORKS) -> list[dict]:
    """Every known framework probed on `device`; one dict per framework."""
    return [probe(fw, device, timeout_s) for fw in frameworks]
