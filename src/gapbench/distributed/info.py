"""Who this process is in a torch.distributed job, which backend a device uses, and what the
interconnect between the devices looks like, as far as this host shows it."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from gapbench.devices.host import DIST_ENV_PREFIXES

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


def backend_for(device: str) -> str:
    """The torch.distributed backend of a device ('cuda', 'xpu:1', …): the one its backend names (nccl on
    CUDA and ROCm, where it is RCCL; gloo on the CPU; hccl on Ascend; xccl on Intel XPU)."""
    from gapbench.devices import backends

    kind = str(device).split(":")[0]
    for b in backends():
        if kind == b.device_type or kind in b.aliases:
            return b.dist_backend
    return "gloo"


def from_env(backend: str, launcher: str) -> DistInfo:
    world = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    return DistInfo(rank=int(os.environ["RANK"]), world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                    local_world_size=local_world, backend=backend, launcher=launcher)


def interconnect(device) -> dict:
    """The links between devices and hosts that this host lets us read; every part is optional."""
    out: dict = {}
    topo = device.topology()
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
