"""The device's distribution, truerun-runtime (packaging/runtime/pyproject.toml): a wheel built
from the repository holds only truerun's own top-level names, installs into a fresh venv that
has its dependencies and nothing of the server's, and runs ``truerun-agent --help`` there.

Offline: the fresh venv sees only the runtime's dependency closure, linked file by file from
this environment's installed distributions (their RECORDs), and pip installs the wheel into it
with ``--no-index``, so a dependency the wheel declares but the closure lacks fails the install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "packaging/runtime"
# What the pyproject packages: the SDK with the agent, and the generated protocol code.
SOURCES = (PROJECT, "truerun_runtime", "protos/gen/truerun")
TOP_LEVEL = {"truerun_runtime", "truerun"}
# The server's own packages and dependencies: none may be importable beside the runtime.
SERVER = (
    *("services", "coordinator", "capacity", "reconciler", "gateway", "runtime"),
    *("sqlalchemy", "asyncpg", "aiosqlite", "alembic", "redis", "starlette", "uvicorn"),
    *("opentelemetry", "prometheus_client", "uvloop"),
)


def _toml(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _project(path: Path) -> dict[str, object]:
    project = _toml(path)["project"]
    assert isinstance(project, dict)
    return project


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Only the paths the pyproject names, copied: the build needs nothing else of the repo.
    tmp = tmp_path_factory.mktemp("runtime-wheel")
    for source in SOURCES:
        shutil.copytree(
            ROOT / source, tmp / "src" / source, ignore=shutil.ignore_patterns("__pycache__")
        )
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("--wheel-dir", str(tmp / "wheels"), str(tmp / "src" / PROJECT)),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (built,) = (tmp / "wheels").glob("truerun_runtime-*.whl")
    return built


def _dist_info(names: set[str], name: str) -> str:
    (path,) = [n for n in names if n.endswith(f".dist-info/{name}")]
    return path


def test_the_wheel_holds_only_truerun_names_and_every_runtime_file(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    record = archive.read(_dist_info(names, "RECORD")).decode().splitlines()
    top = {line.split("/", 1)[0] for line in record if line}
    top = {t for t in top if not t.endswith(".dist-info")}
    assert top == TOP_LEVEL
    assert set(archive.read(_dist_info(names, "top_level.txt")).decode().split()) == TOP_LEVEL
    tracked = subprocess.run(
        ["git", "ls-files", "truerun_runtime", "protos/gen/truerun"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked
    missing = {p.removeprefix("protos/gen/") for p in tracked} - names
    assert not missing, f"files the runtime needs are missing from the wheel: {missing}"
    # `truerun` (agent only, as on a device) and `truerun-agent`
    scripts = archive.read(_dist_info(names, "entry_points.txt")).decode()
    assert scripts.split() == [
        "[console_scripts]",
        "truerun",
        "=",
        "truerun_runtime.agent.cli:device",
        "truerun-agent",
        "=",
        "truerun_runtime.agent.cli:console",
    ]


def test_the_runtime_declares_the_server_s_version_and_pins_and_nothing_else() -> None:
    runtime = _project(ROOT / PROJECT / "pyproject.toml")
    server = _project(ROOT / "pyproject.toml")
    assert runtime["version"] == server["version"]
    assert set(runtime["scripts"]) == {"truerun", "truerun-agent"}  # type: ignore[call-overload]
    required = runtime["dependencies"]
    assert isinstance(required, list) and isinstance(server["dependencies"], list)
    assert set(required) <= set(server["dependencies"])
    names = {canonicalize_name(Requirement(r).name) for r in required}
    assert names == {"grpcio", "protobuf", "googleapis-common-protos"}


def _closure(requirements: list[str]) -> list[str]:
    """Installed distributions the requirements need, transitively (markers evaluated)."""
    seen: list[str] = []
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.append(name)
        try:
            found = distribution(name)
        except PackageNotFoundError:
            pytest.fail(f"the runtime needs {name}, which this environment does not have")
        assert found.version in requirement.specifier, (name, found.version)
        pending.extend(Requirement(r) for r in found.requires or ())
    return seen


def _link_installed(name: str, target: Path) -> None:
    """One installed distribution's files (its RECORD) into ``target``, as symlinks."""
    found = distribution(name)
    for file in found.files or ():
        source = Path(str(found.locate_file(file))).resolve()
        if ".." in file.parts or not source.is_file():
            continue  # console scripts and data outside site-packages
        link = target / file
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(source)


def test_installed_alone_it_runs_the_agent_without_the_server(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).stdout.strip()
    )
    deps = tmp_path / "deps"
    requires = [
        line.split(":", 1)[1].strip()
        for line in zipfile.ZipFile(wheel)
        .read(_dist_info(set(zipfile.ZipFile(wheel).namelist()), "METADATA"))
        .decode()
        .splitlines()
        if line.startswith("Requires-Dist:")
    ]
    for name in _closure(requires):
        _link_installed(name, deps)
    (site / "runtime-deps.pth").write_text(f"{deps}\n")
    install = run(
        *(sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "-q"),
        wheel,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    helped = run(venv / "bin" / "truerun-agent", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: truerun-agent"), helped.stdout
    assert "run-local" in helped.stdout and "--owner" in helped.stdout
    agent_help = run(venv / "bin" / "truerun", "agent", "--help")
    assert agent_help.returncode == 0, agent_help.stderr
    assert agent_help.stdout.startswith("usage: truerun agent"), agent_help.stdout
    server_only = run(venv / "bin" / "truerun", "ls")
    assert server_only.returncode == 2 and "truerun-runtime" in server_only.stderr
    assert "Traceback" not in server_only.stderr  # one line, the server is not installed

    probe = run(
        python,
        "-c",
        "import importlib.util, sys, truerun_runtime.agent.cli, truerun.v1.runtime_service_pb2\n"
        "print(truerun_runtime.agent.cli.__file__)\n"
        "print(*(m for m in sys.argv[1:] if importlib.util.find_spec(m)))",
        *SERVER,
    )
    assert probe.returncode == 0, probe.stderr
    where, importable = [*probe.stdout.splitlines(), ""][:2]
    assert Path(where).is_relative_to(site), where  # the installed copy, not the repository's
    assert importable == "", f"server packages importable beside the runtime: {importable}"

    # The agent starts each supervisor as `python -I -S` with only site-packages on the path:
    # the module must import there without grpc or protobuf.
    supervisor = run(
        python,
        *("-I", "-S", "-c"),
        f"import sys; sys.path.insert(0, {str(site)!r}); import truerun_runtime.agent.supervisor\n"
        "assert not {'grpc', 'google.protobuf'} & set(sys.modules), sorted(sys.modules)",
    )
    assert supervisor.returncode == 0, supervisor.stderr

    # A long task's attempt runs `python -m truerun_runtime.longtask` (the step driver): it
    # is installed too, and outside an attempt it says so in one line (exit 2).
    driver = run(python, "-m", "truerun_runtime.longtask")
    assert driver.returncode == 2, driver.stderr
    assert "not started as a long-task attempt" in driver.stderr
    assert "Traceback" not in driver.stderr
