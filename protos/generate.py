"""Generate the Python code of the truerun protos into ``protos/gen``.

Usage: ``python protos/generate.py`` (with the dev extras installed: grpcio-tools,
mypy-protobuf, googleapis-common-protos).

For every ``protos/truerun/**/*.proto`` this writes ``*_pb2.py``, ``*_pb2.pyi``
(mypy-protobuf), ``*_pb2_grpc.py`` and ``*_pb2_grpc.pyi`` (mypy-protobuf) below
``protos/gen``, which is a package root: ``from truerun.v1 import run_service_pb2``.

Imports resolve offline: ``google/api/*.proto`` and ``google/rpc/*.proto`` from the
installed googleapis-common-protos wheel, ``google/protobuf/*.proto`` from grpc_tools.

The output is deterministic. Code is generated into a temporary directory first and a
file under ``protos/gen`` is rewritten only when its bytes differ, so a rerun with the
same tool versions changes nothing (not even modification times). Generated files whose
proto is gone are deleted. ``__init__.py`` files and ``py.typed`` are kept as they are
(and created when missing).

``--descriptor-set PATH`` also writes the compiled protos with their imports and source
info as a FileDescriptorSet; scripts/check_protos.sh lints that with buf, offline.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

PROTOS_DIR = Path(__file__).resolve().parent
GEN_DIR = PROTOS_DIR / "gen"
PYPROJECT = PROTOS_DIR.parent / "pyproject.toml"
#: Generators whose version shapes the output: each must match its pyproject.toml pin.
TOOLCHAIN = ("grpcio-tools", "mypy-protobuf")
#: Top-level proto packages that are ours (compiled); everything else is an import.
OWN_PACKAGES = ("truerun",)
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
INIT_DOCSTRING = '"""Generated code. Do not edit; run `python protos/generate.py`."""\n'


def _package_dir(module: str) -> Path:
    """The directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"generate.py: {module} is missing; pip install -e '.[dev]'")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def googleapis_include() -> Path:
    """The include root holding ``google/api/field_behavior.proto`` (site-packages)."""
    root = _package_dir("google.api").parent.parent
    if not (root / "google" / "api" / "field_behavior.proto").is_file():
        raise SystemExit(f"generate.py: no google/api/field_behavior.proto in {root}")
    return root


def grpc_tools_include() -> Path:
    """grpc_tools' bundled include root with ``google/protobuf/*.proto``."""
    root = _package_dir("grpc_tools") / "_proto"
    if not (root / "google" / "protobuf" / "timestamp.proto").is_file():
        raise SystemExit(f"generate.py: no google/protobuf/timestamp.proto in {root}")
    return root


def _pins() -> dict[str, str]:
    """``name -> version`` of the ``name==version`` requirements in pyproject.toml."""
    if not PYPROJECT.is_file():
        return {}
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8")).get("project", {})
    requirements: list[str] = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    pins: dict[str, str] = {}
    for requirement in requirements:
        name, sep, version = requirement.partition("==")
        if sep and ";" not in version:
            pins[name.strip().lower()] = version.strip()
    return pins


def check_toolchain() -> None:
    """Refuse to run with generator versions other than the pinned ones.

    Generated code embeds and depends on these versions, so another version would make
    ``protos/gen`` differ from what CI regenerates.
    """
    pins = _pins()
    for name in TOOLCHAIN:
        pinned = pins.get(name)
        installed = importlib.metadata.version(name)
        if pinned is not None and installed != pinned:
            raise SystemExit(f"generate.py: {name} is {installed}, pinned {pinned}")


def _plugin(name: str) -> Path:
    """A protoc plugin installed next to this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"generate.py: {name} not found (pip install mypy-protobuf)")
    return Path(found)


def proto_files() -> list[str]:
    """Our .proto files, relative to ``protos/`` and sorted (stable protoc input)."""
    files = [
        path.relative_to(PROTOS_DIR).as_posix()
        for package in OWN_PACKAGES
        for path in (PROTOS_DIR / package).rglob("*.proto")
    ]
    if not files:
        raise SystemExit(f"generate.py: no .proto files under {PROTOS_DIR}")
    return sorted(files)


def include_args() -> list[str]:
    """The protoc ``-I`` flags: ours, then googleapis, then the well-known types."""
    return [f"-I{PROTOS_DIR}", f"-I{googleapis_include()}", f"-I{grpc_tools_include()}"]


def run_protoc(out_dir: Path, files: Sequence[str], image_out: Path | None) -> None:
    """Compile ``files`` into ``out_dir``, and a descriptor set into ``image_out``."""
    image: list[str] = []
    if image_out is not None:
        # A self-contained FileDescriptorSet: what `buf lint` reads offline.
        image = [
            "--include_imports",
            "--include_source_info",
            f"--descriptor_set_out={image_out}",
        ]
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        *include_args(),
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *image,
        *files,
    ]
    # Output is captured: mypy-protobuf reports every file it writes on stderr.
    result = subprocess.run(
        command,
        cwd=PROTOS_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"generate.py: protoc failed (exit code {result.returncode})")


def _is_generated(path: Path) -> bool:
    return path.name.endswith(GENERATED_SUFFIXES)


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def _mirror(staged: dict[Path, bytes]) -> list[str]:
    """Write staged files that differ; delete generated files no proto produces."""
    changes: list[str] = []
    for relative, data in staged.items():
        if _write_if_changed(GEN_DIR / relative, data):
            changes.append(f"wrote {relative.as_posix()}")
    for package in OWN_PACKAGES:
        for path in sorted((GEN_DIR / package).rglob("*")):
            relative = path.relative_to(GEN_DIR)
            if path.is_file() and _is_generated(path) and relative not in staged:
                path.unlink()
                changes.append(f"deleted {relative.as_posix()}")
    return changes


def _ensure_package_files(staged: dict[Path, bytes]) -> list[str]:
    """Create missing ``__init__.py`` (regular packages) and ``py.typed`` markers."""
    wanted = {GEN_DIR / package / "py.typed" for package in OWN_PACKAGES}
    for relative in staged:
        directory = (GEN_DIR / relative).parent
        while directory != GEN_DIR:
            wanted.add(directory / "__init__.py")
            directory = directory.parent
    changes: list[str] = []
    for path in sorted(wanted):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            text = INIT_DOCSTRING if path.suffix == ".py" else ""
            path.write_text(text, encoding="utf-8")
            changes.append(f"wrote {path.relative_to(GEN_DIR).as_posix()}")
    return changes


def sync(staging: Path) -> list[str]:
    """Mirror the generated files of ``staging`` into GEN_DIR; return what changed."""
    staged = {
        path.relative_to(staging): path.read_bytes()
        for path in sorted(staging.rglob("*"))
        if path.is_file() and _is_generated(path)
    }
    return _mirror(staged) + _ensure_package_files(staged)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Generate protos/gen from the protos.")
    parser.add_argument("-q", "--quiet", action="store_true", help="quiet on success")
    parser.add_argument(
        "--descriptor-set",
        type=Path,
        metavar="PATH",
        help="also write a FileDescriptorSet with imports and source info (for buf)",
    )
    args = parser.parse_args(argv)
    check_toolchain()
    files = proto_files()
    with tempfile.TemporaryDirectory(prefix="truerun-protos-") as tmp:
        staging = Path(tmp)
        descriptor_set = args.descriptor_set.resolve() if args.descriptor_set else None
        run_protoc(staging, files, descriptor_set)
        changes = sync(staging)
    if not args.quiet:
        for change in changes:
            print(change)
        print(f"generate.py: {len(files)} protos, {len(changes)} file(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
