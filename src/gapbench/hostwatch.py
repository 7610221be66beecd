"""The host watch: what disturbed a measurement while it ran.

On the host: CPU time other processes took on the CPUs this process may use, CPU steal (a hypervisor taking
the cores), the load average, the CPU clock where the OS reports it. On the device: what its backend's
telemetry reads (SM and memory clocks, temperature, power, throttle reasons, ECC events). A measurement taken
while other processes took a noticeable share of our CPUs, while the hypervisor stole them, or while the
device throttled is flagged, with the reason in one line ("host busy: other processes took 1.3 of 2 CPUs").
"""

from __future__ import annotations

import resource
import threading
import time

import psutil

from gapbench.devices import host

OTHER_CPU_SHARE = 0.25  # other processes using more than this share of our CPUs flags the measurement
STEAL_SHARE = 0.05  # steal above this share of our CPUs' time flags it
SAMPLE_EVERY_S = 0.25  # device telemetry sampling period


def _cpu_seconds(cpus: list[int]) -> tuple[float, float, float] | None:
    """(busy, steal, total) CPU seconds the given CPUs spent since boot; steal is 0 where the OS counts none
    (macOS)."""
    try:
        times = psutil.cpu_times(percpu=True)
    except OSError:
        return None
    # psutil lists the online CPUs in order: a CPU's number is its index unless a CPU below it is offline
    ours = [times[c]._asdict() for c in cpus if c < len(times)]
    if not ours:
        return None
    busy = steal = total = 0.0
    for t in ours:
        # Linux counts guest time in user and nice already
        spent = sum(v for k, v in t.items() if k not in ("guest", "guest_nice"))
        st = t.get("steal", 0.0)
        busy += spent - t["idle"] - t.get("iowait", 0.0) - st
        steal += st
        total += spent
    return busy, steal, total


def _own_cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and its waited-for children."""
    # getrusage, not psutil: psutil's children_user and children_system are 0 on macOS, getrusage counts
    # waited-for children there too
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _load_avg() -> float | None:
    try:
        return psutil.getloadavg()[0]
    except OSError:
        return None


class Watch:
    """start() before a measurement, stop() after: a dict of what happened meanwhile, `flagged` and `reasons`."""

    def __init__(self, device=None):
        self.device = device
        self.cpus = host.usable_cpus()
        self._samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._cpu0 = _cpu_seconds(self.cpus)
        self._own0 = _own_cpu_seconds()
        self._mhz0 = host.cpu_current_mhz()
        first = self._telemetry()
        self._device0 = first
        if first is not None:
            self._samples.append(first)
            self._thread = threading.Thread(target=self._sample, name="gapbench-watch", daemon=True)
            self._thread.start()

    def _telemetry(self) -> dict | None:
        if self.device is None:
            return None
        try:
            return self.device.telemetry()
        except Exception:
            return None

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            t = self._telemetry()
            if t is not None:
                self._samples.append(t)

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        wall = max(time.monotonic() - self._t0, 1e-9)
        out: dict = {"seconds": wall, "cpus": len(self.cpus), "load_avg_1m": _load_avg()}
        reasons: list[str] = []
        cpu1 = _cpu_seconds(self.cpus)
        if self._cpu0 is not None and cpu1 is not None:
            busy = cpu1[0] - self._cpu0[0]
            total = max(cpu1[2] - self._cpu0[2], 1e-9)
            steal = cpu1[1] - self._cpu0[1]
            other = max(busy - (_own_cpu_seconds() - self._own0), 0.0)
            out["other_cpus"] = other / wall  # CPUs' worth of time other processes took, on average
            out["steal_share"] = steal / total
            if out["other_cpus"] > OTHER_CPU_SHARE * len(self.cpus):
                load = f"; load {out['load_avg_1m']:.1f}" if out["load_avg_1m"] is not None else ""
                reasons.append(f"host busy: other processes took {out['other_cpus']:.1f} of {len(self.cpus)} "
                               f"CPUs{load}")
            if out["steal_share"] > STEAL_SHARE:
                reasons.append(f"CPU steal: the hypervisor took {out['steal_share']:.0%} of the CPUs' time")
        mhz1 = host.cpu_current_mhz()
        if self._mhz0 and mhz1:
            out["cpu_mhz"] = [self._mhz0, mhz1]
        if self._samples:
            summary, why = summarize_telemetry(self._samples)
            out["device"] = summary
            reasons += why
        out["flagged"] = bool(reasons)
        out["reasons"] = reasons
        return out


def summarize_telemetry(samples: list[dict]) -> tuple[dict, list[str]]:
    """Min/max of each numeric reading over the samples; throttle reasons seen; ECC events that appeared."""
    summary: dict = {}
    keys = sorted({k for s in samples for k, v in s.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    for k in keys:
        vals = [s[k] for s in samples if isinstance(s.get(k), (int, float))]
        summary[k] = [min(vals), max(vals)]
    throttles = sorted({r for s in samples for r in s.get("throttle", []) or []})
    limits = sorted({r for s in samples for r in s.get("limits", []) or []})
    reasons = []
    if limits:
        summary["limits"] = limits  # e.g. a power cap at full load: normal operation, recorded, not flagged
    if throttles:
        summary["throttle"] = throttles
        reasons.append(f"device throttled: {', '.join(throttles)}")
    ecc = [s.get("ecc_errors") for s in samples if isinstance(s.get("ecc_errors"), (int, float))]
    if ecc and max(ecc) > min(ecc):
        reasons.append(f"ECC errors during the measurement: {int(max(ecc) - min(ecc))}")
    return summary, reasons
