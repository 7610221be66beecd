"""Who this process is in a torch.distributed job, which backend a device uses, and what the
interconnect between the devices looks like, as far as this host shows it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass

# the collective library PyTorch uses for each device type
BACKENDS = {"cuda": "nccl", "cpu": "gloo", "npu": "hccl", "xpu": "xccl", "mps": "gloo"}

# env vars of the collective libraries and launchers worth recording with a result
DIST_ENV_PREFIXES = ("NCCL_", "RCCL_", "GLOO_", "HCCL_", "CCL_", "FI_", "UCX_", "TORCH_NCCL_", "TORCH_DISTRIBUTED",
                     "TORCHELASTIC_", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB", "SLURM_NNODES", "SLURM_NTASKS")
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class DistInfo:
    """This rank's place in the job (Context.dist for workloads that run on every rank)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    node_count: int = 1
    launcher: str = "torchrun"  # "gapbench" (--nproc) or "torchrun" (an external launcher)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def to_dict(self) -> dict:
        return asdict(self)


def under_launcher(env: dict | None = None) -> bool:
    """Whether this process was started by torchrun (or srun/mpirun with the same env vars set)."""
    env = os.environ if env is None else env
    return all(k in env for k in LAUNCH_ENV)


def env_rank(env: dict | None = None) -> int | None:
    """RANK from the environment, None outside a launcher."""
    env = os.environ if env is None else env
    return int(env["RANK"]) if under_launcher(env) else None


def backend_for(device_type: str) -> str:
    """nccl (CUDA and ROCm, where it is RCCL), gloo (CPU), hccl (Ascend), xccl (Intel XPU)."""
    return BACKENDS.get(device_type, "gloo")


def from_env(backend: str, launcher: str) -> DistInfo:
    world = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    return DistInfo(rank=int(os.environ["RANK"]), world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                    local_world_size=local_world, backend=backend, launcher=launcher)


def interconnect(device_type: str) -> dict:
    """The links between devices and hosts that this host lets us read; every part is optional."""
    out: dict = {}
    topo = _device_topology(device_type)
    if topo:
        out["topology"] = topo
    nets = network_interfaces()
    if nets:
        out["network"] = nets
    ib = infiniband_devices()
    if ib:
        out["infiniband"] = ib
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(DIST_ENV_PREFIXES)}
    if env:
        out["env"] = env
    return out


def _run(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def _device_topology(device_type: str) -> dict | None:
    """nvidia-smi topo -m (NVLink/PCIe matrix), rocm-smi --showtopo (XGMI), npu-smi topology (HCCS)."""
    if device_type == "cuda":
        import torch

        if getattr(torch.version, "hip", None):
            text = _run(["rocm-smi", "--showtopo"]) or _run(["amd-smi", "topology"])
            return {"tool": "rocm-smi --showtopo", "text": text} if text else None
        text = _run(["nvidia-smi", "topo", "-m"])
        if text:
            return {"tool": "nvidia-smi topo -m", "text": _strip_ansi(text), "links": nvlink_summary(text)}
        return None
    if device_type == "npu":
        text = _run(["npu-smi", "info", "-t", "topo"])
        return {"tool": "npu-smi info -t topo", "text": text} if text else None
    if device_type == "xpu":
        text = _run(["xpu-smi", "topology", "-m"])
        return {"tool": "xpu-smi topology -m", "text": text} if text else None
    return None


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def nvlink_summary(topo_text: str) -> dict:
    """How many GPU pairs each link kind joins in an `nvidia-smi topo -m` matrix (NV#, PIX, PXB, PHB, NODE,
    SYS), each unordered pair counted once; the NIC and affinity columns are left out."""
    lines = [ln for ln in _strip_ansi(topo_text).splitlines() if ln.strip()]
    header = next((ln.split() for ln in lines if ln.split() and re.fullmatch(r"GPU\d+", ln.split()[0])
                   and not ln.startswith("GPU")), None) or next((ln.split() for ln in lines), [])
    gpus = 0
    for tok in header:
        if not re.fullmatch(r"GPU\d+", tok):
            break
        gpus += 1
    counts: dict[str, int] = {}
    for line in lines:
        cells = line.split()
        m = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if not m or line[0].isspace():
            continue
        i = int(m.group(1))
        for j, cell in enumerate(cells[1:1 + gpus]):
            if j > i and re.fullmatch(r"NV\d+|PIX|PXB|PHB|NODE|SYS", cell):
                counts[cell] = counts.get(cell, 0) + 1
    return counts


def network_interfaces() -> list[dict]:
    """Up, non-loopback interfaces from sysfs: name, link speed (Mb/s), MTU, and whether it is InfiniBand."""
    base = "/sys/class/net"
    out = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        if name == "lo":
            continue
        info = {"name": name}
        for key in ("operstate", "speed", "mtu", "type"):
            try:
                with open(f"{base}/{name}/{key}") as f:
                    info[key] = f.read().strip()
            except OSError:
                pass
        if info.get("operstate") not in (None, "up", "unknown"):
            continue
        for key in ("speed", "mtu"):
            try:
                info[key] = int(info[key])
            except (KeyError, ValueError):
                info.pop(key, None)
        if info.get("speed", 0) < 0:
            info.pop("speed")
        info["kind"] = "infiniband" if info.pop("type", "") == "32" else "ethernet"
        out.append(info)
    return out


def infiniband_devices() -> list[dict]:
    """RDMA adapters (/sys/class/infiniband): name, port rate and link layer (InfiniBand or RoCE Ethernet)."""
    base = "/sys/class/infiniband"
    out = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        ports = []
        try:
            port_ids = sorted(os.listdir(f"{base}/{name}/ports"))
        except OSError:
            port_ids = []
        for p in port_ids:
            port = {"port": p}
            for key in ("rate", "link_layer", "state"):
                try:
                    with open(f"{base}/{name}/ports/{p}/{key}") as f:
                        port[key] = f.read().strip()
                except OSError:
                    pass
            ports.append(port)
        out.append({"name": name, "ports": ports})
    return out
