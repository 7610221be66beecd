"""Energy counters: NVML (NVIDIA), amdsmi (AMD), RAPL (Intel/AMD CPUs via powercap). Absent is a normal answer.

EnergyMeter.start()/stop() returns joules spent by the device between the two calls, or None when no
counter is readable here. Which source was used is in `source`.
"""

from __future__ import annotations

import glob
import os

from gapbench.devices import Device


def _rapl_zones() -> list[str]:
    # package-level zones only (intel-rapl:N), not their sub-zones (intel-rapl:N:M), to avoid double counting
    return sorted(p for p in glob.glob("/sys/class/powercap/*-rapl:*") if p.count(":") == 1
                  and os.access(os.path.join(p, "energy_uj"), os.R_OK))


def _read_uj(zone: str) -> tuple[int, int]:
    with open(os.path.join(zone, "energy_uj")) as f:
        e = int(f.read())
    try:
        with open(os.path.join(zone, "max_energy_range_uj")) as f:
            rng = int(f.read())
    except OSError:
        rng = 2**32
    return e, rng


class EnergyMeter:
    def __init__(self, device: Device):
        self.device = device
        self.source: str | None = None
        self._read = self._pick()
        self._start = None

    def _pick(self):
        d = self.device
        if d.type == "cuda" and not d.is_rocm:
            try:
                import pynvml

                pynvml.nvmlInit()
                h = pynvml.nvmlDeviceGetHandleByIndex(d.index)
                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # mJ, Volta and newer
                self.source = "nvml"
                return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
            except Exception:
                return None
        if d.type == "cuda" and d.is_rocm:
            try:
                import amdsmi

                amdsmi.amdsmi_init()
                h = amdsmi.amdsmi_get_processor_handles()[d.index]

                def read():
                    info = amdsmi.amdsmi_get_energy_count(h)
                    counter = info.get("energy_accumulator", info.get("power"))
                    res = info.get("counter_resolution", 15.3)  # µJ per count
                    return counter * res / 1e6

                read()
                self.source = "amdsmi"
                return read
            except Exception:
                return None
        if d.is_cpu:
            zones = _rapl_zones()
            if not zones:
                return None
            self.source = "rapl"
            self._zones = zones
            return None  # RAPL handled in start/stop because of wrap-around
        return None

    @property
    def available(self) -> bool:
        return self.source is not None

    def start(self) -> None:
        if self.source == "rapl":
            self._start = [_read_uj(z) for z in self._zones]
        elif self._read is not None:
            self._start = self._read()

    def stop(self) -> float | None:
        if self._start is None:
            return None
        try:
            if self.source == "rapl":
                total = 0
                for z, (e0, rng) in zip(self._zones, self._start, strict=True):
                    e1, _ = _read_uj(z)
                    total += (e1 - e0) if e1 >= e0 else (e1 + rng - e0)
                return total / 1e6
            return self._read() - self._start
        except Exception:
            return None
