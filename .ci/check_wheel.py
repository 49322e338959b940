"""CI: build the wheel, check what it holds, install it in a new virtual environment, run it.

    python .ci/check_wheel.py

1. ``python -m build`` of a copy of the checkout's files (those git tracks or would track:
   no ``build/`` nor ``*.egg-info`` left by an earlier build can stand in for a file the
   package would miss): the source distribution, then the wheel built from it in an
   isolated environment, as a release is;
2. the wheel holds every module of ``dagagent/`` and the package data the code reads (the
   stub of public names, ``py.typed``, the viewer's templates and static files), nothing of
   the tests, the docs or the benchmarks, and metadata that names the version of
   ``dagagent.__version__`` and the ``dagagent`` command;
3. a new virtual environment (no ``--system-site-packages``) installs the wheel with its
   dependencies, and there ``dagagent --help``, ``dagagent --version`` and a run of the
   bundled example (offline, demo tools) work, from a directory outside the checkout.

Exit 0 when all of that holds; otherwise the first problem, and exit 1.
"""

from __future__ import annotations

import ast
import email.parser
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dagagent"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dagagent-wheel-") as tmp:
        scratch = Path(tmp)
        wheel = build(copy_of_checkout(scratch / "src"), scratch / "dist")
        problems = check_contents(wheel)
        if not problems:
            problems = check_installed(wheel, scratch)
    if problems:
        for problem in problems:
            print(f"wheel check: {problem}", file=sys.stderr)
        return 1
    print(f"wheel check: {wheel.name} holds what it should, installs and runs")
    return 0


def copy_of_checkout(to: Path) -> Path:
    listed = run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    for name in listed.splitlines():
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


def build(source: Path, out: Path) -> Path:
    run([sys.executable, "-m", "build", "--outdir", str(out), str(source)])
    wheels = sorted(out.glob("dagagent-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"wheel check: expected one wheel in {out}, found {wheels}")
    return wheels[0]


def version() -> str:
    """``dagagent.__version__``, read from the source without importing it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    raise SystemExit("wheel check: dagagent/__init__.py has no __version__")


def expected_files() -> set[str]:
    """What the wheel must hold of the package: its modules and the data the code reads."""
    files = {
        p.relative_to(ROOT).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".pyi")
    }
    files.add("dagagent/py.typed")
    ui = PACKAGE / "ui"
    for folder in (ui / "templates", ui / "static"):
        files.update(p.relative_to(ROOT).as_posix() for p in folder.iterdir() if p.is_file())
    return files


def check_contents(wheel: Path) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        missing = sorted(expected_files() - names)
        if missing:
            problems.append(f"{len(missing)} file(s) of the package missing: {missing[:10]}")
        stray = sorted(
            n for n in names if not n.startswith(("dagagent/", "dagagent-")) or "__pycache__" in n
        )
        if stray:
            problems.append(f"files that are not the package's: {stray[:10]}")
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
            problems.append("the wheel carries no LICENSE")
        metadata = email.parser.Parser().parsestr(z.read(info).decode("utf-8"))
        if metadata["Version"] != version():
            problems.append(
                f"metadata version {metadata['Version']} is not __version__ {version()}"
            )
        points = z.read(info.replace("METADATA", "entry_points.txt")).decode("utf-8")
        if "dagagent = dagagent.__main__:main" not in points:
            problems.append(f"no dagagent command among the entry points:\n{points}")
    return problems


def check_installed(wheel: Path, scratch: Path) -> list[str]:
    venv = scratch / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    run([str(bindir / "python"), "-m", "pip", "install", "--quiet", str(wheel)])
    work = scratch / "user"
    shutil.copytree(ROOT / "examples", work / "examples")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DAGAGENT_", "PYTHON")) and k != "VIRTUAL_ENV"
    }
    env["DAGAGENT_HOME"] = str(scratch / "home")
    command = str(bindir / "dagagent")
    problems = []
    helped = run([command, "--help"], cwd=work, env=env)
    if "Usage: dagagent" not in helped:
        problems.append(f"dagagent --help printed no usage:\n{helped}")
    said = run([command, "--version"], cwd=work, env=env).strip()
    if version() not in said:
        problems.append(f"dagagent --version says {said!r}, not {version()}")
    ran = run([command, "run", "examples/weather.json", "--json"], cwd=work, env=env)
    if '"status": "succeeded"' not in ran and '"status":"succeeded"' not in ran:
        problems.append(f"the bundled example did not succeed:\n{ran}")
    return problems


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"wheel check: {' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())
