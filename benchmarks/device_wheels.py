"""The Python packages a lent accelerator machine lacks, carried to it as wheels (it reaches no registry).

    python benchmarks/device_wheels.py download [--dest .whl]     here, where PyPI is reachable (`make device-wheels`)
    python benchmarks/device_wheels.py needed .whl                there: the wheels this interpreter must install

`download` reads what gapbench requires (pyproject.toml: its dependencies and the `models` and `coverage`
extras, torch left out: the machine's own build is the one to measure) and what the machine has
(benchmarks/data/device-packages.txt), and fetches for CPython 3.12 on x86-64 Linux (manylinux, or pure Python):

- every required distribution the machine lacks, and then every requirement of those wheels it lacks, to the end;
- a pure-Python wheel of a distribution the machine has at a version not known here, where something carried
  or gapbench needs a minimum version of it (a binary one is not carried: its version is assumed to fit);
- a wheel of any distribution whose known version on the machine a requirement refuses.

Each at the version installed in this interpreter when that one fits (the version the tests ran with), else
the newest that fits. One version of each; nothing else.

`needed` prints the path of each carried wheel this interpreter needs: the distribution is absent, or present at
a version that gapbench's or another needed wheel's requirement refuses. Installed with `pip install --no-index
--no-deps --target` into a private folder first on PYTHONPATH, nothing of the machine is replaced.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.metadata as md
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "benchmarks" / "data" / "device-packages.txt"
EXTRAS = ("models", "coverage")
SKIP = {"torch"}  # the machine's own build is what gets measured
TARGET_ENV = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def gapbench_requirements(extras=EXTRAS) -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for e in extras:
        reqs += project.get("optional-dependencies", {}).get(e, [])
    return reqs


def machine_packages(path: Path = PACKAGES) -> dict[str, str | None]:
    """name -> version (None where the listing showed none)."""
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            out[norm(line[0])] = line[1] if len(line) > 1 else None
    return out


def wheel_requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(z.read(meta).decode("utf-8", "replace"), headersonly=True)
    return msg.get_all("Requires-Dist") or []


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    return norm(name), version


def applies(marker, env: dict | None, extras=()) -> bool:
    """Whether a requirement's marker holds on the target (env; None: this interpreter) for one of `extras`."""
    if marker is None:
        return True
    base = dict(env or {})
    return any(marker.evaluate(base | {"extra": e}) for e in ("", *extras))


# ---- here: what to carry, and fetching it ----------------------------------------------------------------

def plan_downloads(machine: dict[str, str | None], reqs: list[str], read_wheel, local_version) -> dict[str, object]:
    """What to carry, walking the requirements down from gapbench's: {"fetched": name -> (path, version),
    "notes": [...]}. read_wheel(name, specifier) fetches a wheel and returns (path, version, its requirements,
    pure-Python?) or None; local_version(name) is this interpreter's version of it, or None."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    wanted: dict[str, SpecifierSet] = {}
    fetched: dict[str, tuple] = {}
    notes: list[str] = []
    todo = [(Requirement(r), ()) for r in reqs]
    while todo:
        r, parent_extras = todo.pop(0)
        name = norm(r.name)
        if name in SKIP or not applies(r.marker, TARGET_ENV, parent_extras):
            continue
        spec = wanted.get(name, SpecifierSet()) & r.specifier
        wanted[name] = spec
        have = machine.get(name, "absent")
        fits = have != "absent" and (spec.contains(have, prereleases=True) if have is not None else
                                     not any(s.operator in (">=", ">", "==", "~=") for s in spec))
        if name in fetched and spec.contains(fetched[name][1], prereleases=True) and not r.extras:
            continue
        if fits and not r.extras:
            continue
        pin = local_version(name)
        got = read_wheel(name, f"=={pin}" if pin and spec.contains(pin, prereleases=True) else str(spec))
        if got is None:
            notes.append(f"{name}{spec}: no wheel for CPython 3.12 on x86-64 Linux")
            continue
        path, version, requires, pure = got
        todo += [(Requirement(x), tuple(r.extras)) for x in requires]
        if fits or (have is None and not pure):  # read for its extras only, or present and binary: not carried
            if name not in fetched:
                Path(path).unlink()
            if not fits:
                notes.append(f"{name}: the machine has it (version not known); a binary wheel is not carried")
            continue
        fetched[name] = (path, version)
    return {"fetched": fetched, "notes": notes}


def pip_download(dest: Path, python: str = "3.12"):
    def read(name: str, spec: str):
        before = set(dest.glob("*.whl"))
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               python, "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(dest),
               f"{name}{spec}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return None
        new = [w for w in dest.glob("*.whl") if w not in before] or [
            w for w in dest.glob("*.whl") if wheel_name_version(w)[0] == norm(name)]
        if not new:
            return None
        w = max(new, key=lambda p: p.stat().st_mtime)
        for other in dest.glob("*.whl"):  # one version of each
            if other != w and wheel_name_version(other)[0] == norm(name):
                other.unlink()
        return w, wheel_name_version(w)[1], wheel_requirements(w), w.name.endswith("-none-any.whl")
    return read


def local_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def download(dest: Path, python: str = "3.12", packages: Path = PACKAGES) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    TARGET_ENV.update(python_version=python, python_full_version=f"{python}.0")
    out = plan_downloads(machine_packages(packages), gapbench_requirements(), pip_download(dest, python),
                         local_version)
    kept = {Path(p) for p, _ in out["fetched"].values()}
    for w in dest.glob("*.whl"):
        if w not in kept:
            w.unlink()
    total = sum(p.stat().st_size for p in kept)
    for p in sorted(kept):
        print(f"{p.name}  {p.stat().st_size / 2**20:.1f} MiB")
    for n in out["notes"]:
        print(f"note: {n}")
    print(f"{len(kept)} wheel(s), {total / 2**20:.1f} MiB in {dest}")
    return 0


# ---- there: which carried wheels this interpreter needs --------------------------------------------------

def needed(folder: Path) -> list[Path]:
    wheels = {wheel_name_version(w)[0]: w for w in sorted(folder.glob("*.whl"))}
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:  # without packaging, only what is absent
        return [w for n, w in wheels.items() if local_version(n) is None]
    chosen: dict[str, Path] = {}
    changed = True
    while changed:
        changed = False
        reqs = [(Requirement(r), ()) for r in gapbench_requirements()]
        asked = {norm(r.name): tuple(r.extras) for r, _ in reqs if r.extras}  # pathspec[re2]: re2's needs too
        for name, w in [*chosen.items(), *((n, wheels[n]) for n in asked if n in wheels and n not in chosen)]:
            reqs += [(Requirement(r), asked.get(name, ())) for r in wheel_requirements(w)]
        for r, extras in reqs:
            name = norm(r.name)
            if name in chosen or name not in wheels or not applies(r.marker, None, extras):
                continue
            have = local_version(name)
            carried = wheel_name_version(wheels[name])[1]
            if have is None or (not r.specifier.contains(Version(have), prereleases=True)
                                and r.specifier.contains(Version(carried), prereleases=True)):
                chosen[name] = wheels[name]
                changed = True
    return sorted(chosen.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download", help="fetch the wheels the machine lacks (here, where PyPI is reachable)")
    d.add_argument("--dest", default=str(ROOT / ".whl"))
    d.add_argument("--python", default="3.12", help="the machine's Python, MAJOR.MINOR (default 3.12)")
    d.add_argument("--packages", default=str(PACKAGES), help="the machine's package list (NAME [VERSION] a line)")
    n = sub.add_parser("needed", help="print the carried wheels this interpreter must install")
    n.add_argument("folder")
    args = ap.parse_args(argv)
    if args.cmd == "download":
        return download(Path(args.dest), args.python, Path(args.packages))
    for w in needed(Path(args.folder)):
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
