"""README.md and docs/*.md hold together (issue #15 item 5): every document the README cites
exists, every relative link in README.md and docs/*.md resolves (its heading too), links to
screenshots name a browser test that saves them, and the generated parts are current; the
same checks `make docs` runs (scripts/docs.py). Each check is also shown to catch a breach
in a small made-up tree."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_check", ROOT / "scripts/docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_check"] = module
    spec.loader.exec_module(module)
    return module


docs = _docs()


def test_every_relative_link_resolves() -> None:
    assert docs.link_problems() == []
    assert len(docs.documents()) >= 10


def test_every_document_the_readme_cites_exists() -> None:
    assert docs.cited_problems() == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cited = [t for t in docs.links(readme) if not t.startswith("http")]
    assert "docs/long-tasks.md" in cited and len(cited) > 10
    for target in cited:
        assert (ROOT / target.partition("#")[0]).exists(), target


def test_the_generated_parts_are_current() -> None:
    assert docs.generated_problems() == []


def test_make_docs_passes() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "documents, their links and the generated parts are up to date" in done.stdout


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Output and terminal events", "output-and-terminal-events"),
        ("`truerun task` and handles", "truerun-task-and-handles"),
        ("TLS", "tls"),
        ("One action contract and short handles", "one-action-contract-and-short-handles"),
        ("Exit statuses (CLI)", "exit-statuses-cli"),
    ],
)
def test_anchors_are_githubs(heading: str, slug: str) -> None:
    assert docs.anchor(heading) == slug


def _tree(tmp_path: Path, readme: str, doc: str = "# Guide\n\n## Deep part\n") -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests" / "browser").mkdir(parents=True)
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs" / "guide.md").write_text(doc)
    (tmp_path / "tests" / "browser" / "test_pages.py").write_text(
        "async def test_runs_page(dashboard):\n"
        '    await dashboard.screenshot(page, "runs")\n'
        '    await dashboard.screenshot(page, f"state-{state}")\n'
    )
    return tmp_path


def test_a_broken_link_a_missing_heading_and_an_unsaved_screenshot_are_caught(
    tmp_path: Path,
) -> None:
    root = _tree(
        tmp_path,
        "[ok](docs/guide.md#deep-part) [web](https://example.com/x.md)\n"
        "[gone](docs/missing.md) [bad anchor](docs/guide.md#nowhere)\n"
        "![shot](test-artifacts/screenshots/test_runs_page/runs.png)\n"
        "[f-string](test-artifacts/screenshots/test_runs_page[pg]/state-running.png)\n"
        "[folder](../test-artifacts/screenshots/test_runs_page/)\n"
        "[other shot](test-artifacts/screenshots/test_runs_page[sqlite]/filters.png)\n"
        "[no test](test-artifacts/screenshots/test_nothing/runs.png)\n"
        "```\n[in code](docs/not-checked.md)\n```\n",
        "# Guide\n\n## Deep part\n[back](../README.md) [up](../nope.md)\n",
    )
    problems = docs.link_problems(root)
    assert len(problems) == 5, problems
    said = "\n".join(problems)
    assert "docs/missing.md does not exist" in said
    assert "no heading #nowhere" in said
    assert "no browser test saves a screenshot named 'filters'" in said
    assert "no test test_nothing under tests/browser" in said
    assert "docs/guide.md: (../nope.md)" in said


def test_a_cited_path_that_is_gone_is_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path, "see `docs/guide.md`, `docs/old.md` and `elsewhere/x.py`\n")
    assert docs.cited_problems(root) == ["README.md: `docs/old.md` does not exist"]


def test_a_stale_generated_part_is_caught_and_rewritten(tmp_path: Path) -> None:
    for name in (
        "docs/operations.md",
        "docs/long-tasks.md",
        "docs/tenancy.md",
        "gateway/openapi.json",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"))
    operations = tmp_path / "docs/operations.md"
    operations.write_text(operations.read_text().replace("| `TRUERUN_DATA_DIR` |", "| `X` |"))
    assert docs.generated_problems(tmp_path) == [
        "docs/operations.md: stale; `make docs-update` rewrites it"
    ]
    assert docs.generated_problems(tmp_path, write=True) == []
    assert docs.generated_problems(tmp_path) == []
    assert operations.read_text() == (ROOT / "docs/operations.md").read_text()
