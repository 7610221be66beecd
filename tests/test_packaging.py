"""The package as users install it: metadata without deprecation warnings, and a wheel that holds every data
file the code reads."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "gapbench"


def data_files() -> set[str]:
    """Every file of the package that is not Python code: what the wheel must carry (git's view of the tree)."""
    p = subprocess.run(["git", "ls-files", "src/gapbench"], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        pytest.skip("not a git checkout")
    return {f.removeprefix("src/") for f in p.stdout.split() if not f.endswith(".py")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(out), str(REPO)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0 and "No module named" in p.stderr:
        pytest.skip(f"cannot build here: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Deprecat" not in p.stderr + p.stdout, (p.stderr + p.stdout)[-3000:]
    (whl,) = out.glob("gapbench-*.whl")
    return zipfile.ZipFile(whl)


def test_the_wheel_holds_every_data_file_the_package_reads(wheel):
    names = set(wheel.namelist())
    wanted = data_files()
    assert {"gapbench/specs/accelerators.toml", "gapbench/specs/references.toml", "gapbench/scan/rules.toml",
            "gapbench/coverage/rules.toml", "gapbench/py.typed"} <= wanted
    assert wanted <= names, sorted(wanted - names)


def test_the_wheel_declares_its_license_and_python_310_dependencies(wheel):
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    text = wheel.read(meta).decode()
    assert "License-Expression: Apache-2.0" in text
    assert any(n.endswith("licenses/LICENSE") for n in wheel.namelist())
    assert "Requires-Dist: tomli>=2; python_version < \"3.11\"" in text
    assert "Requires-Dist: torch>=2.4" in text
