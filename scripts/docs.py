"""`make docs`: the documentation checked against the code it describes, writing nothing.

1. Every relative link in README.md and docs/*.md resolves: the file exists and a
   ``#fragment`` names one of its headings (GitHub's anchors). A link into
   ``test-artifacts/screenshots/<test>/<name>.png`` is to a file the browser tests write
   (gitignored): it must name a test under tests/browser and a screenshot name those tests
   pass to ``screenshot(...)``, found by reading the test sources, not by the file existing.
2. Every repository path README.md cites in backticks (``docs/long-tasks.md``,
   ``scripts/ensure_chromium.sh``) exists.
3. What is generated from code is what the code generates now: the settings table of
   docs/operations.md (``python -m kernel.config_doc``), the generated tables of
   docs/long-tasks.md (``python -m longtasks.domain.doc``) and gateway/openapi.json
   (``python -m gateway.openapi``).

``python scripts/docs.py`` prints each problem on a line and exits 1 when there is one;
``--write`` rewrites the generated parts first (``make docs-update``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = "test-artifacts/screenshots/"
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)|!\[[^\]\n]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_CITED = re.compile(r"`([A-Za-z0-9_.][\w.\-/]*/[\w.\-/]*)`")


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _prose(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks (a link in a code block is code)."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def links(text: str) -> list[str]:
    """The targets of the Markdown links (and images) in ``text``."""
    return [m.group(1) or m.group(2) for line in _prose(text) for m in _LINK.finditer(line)]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces
    to hyphens (``## Output and terminal events`` -> ``output-and-terminal-events``)."""
    plain = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for line in _prose(text):
        match = _HEADING.match(line)
        if match:
            base = anchor(match.group(1))
            n = 0
            while (candidate := base if n == 0 else f"{base}-{n}") in found:
                n += 1
            found.add(candidate)
    return found


def _saved_names(browser_sources: str) -> list[re.Pattern[str]]:
    """What the browser tests pass to ``screenshot(...)``: each string literal there (an
    f-string's ``{...}`` matching anything), and every other quoted word of the sources (a
    name passed through a variable)."""
    called = re.findall(r"screenshot\([^)]*?f?[\"']([^\"']+)[\"']", browser_sources)
    quoted = re.findall(r"[\"']([\w.\-]+)[\"']", browser_sources)
    return [
        re.compile(
            "".join(
                ".+" if part.startswith("{") else re.escape(part)
                for part in re.split(r"(\{[^}]*\})", name)
            )
        )
        for name in [*called, *quoted]
    ]


def screenshot_problem(target: str, browser_sources: str) -> str | None:
    """``test-artifacts/screenshots/<test>/[<name>.png]``: <test> a browser test (its
    parameters, ``[...]``, aside) and <name> a screenshot those tests save."""
    # A parametrized test's folder is written percent-encoded in a link: test[ttl-3s].
    rest = unquote(target.split(SCREENSHOTS, 1)[1]).rstrip("/")
    parts = rest.split("/") if rest else []
    if not 1 <= len(parts) <= 2 or (len(parts) == 2 and not parts[1].endswith(".png")):
        return "expected test-artifacts/screenshots/<test>/ or .../<test>/<name>.png"
    test = parts[0].split("[", 1)[0]
    if not re.search(rf"\bdef {re.escape(test)}\(", browser_sources):
        return f"no test {test} under tests/browser saves it"
    if len(parts) == 2:
        name = parts[1].removesuffix(".png")
        if not any(saved.fullmatch(name) for saved in _saved_names(browser_sources)):
            return f"no browser test saves a screenshot named {name!r}"
    return None


def link_problems(root: Path = ROOT) -> list[str]:
    browser = "\n".join(
        p.read_text(encoding="utf-8") for p in (root / "tests/browser").glob("*.py")
    )
    problems: list[str] = []
    for doc in documents(root):
        text = doc.read_text(encoding="utf-8")
        where = doc.relative_to(root)
        for target in links(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
                continue
            path, _, fragment = target.partition("#")
            if SCREENSHOTS in path:
                problem = screenshot_problem(path, browser)
                if problem:
                    problems.append(f"{where}: ({target}): {problem}")
                continue
            resolved = (doc.parent / path).resolve() if path else doc
            if not resolved.exists():
                problems.append(f"{where}: ({target}): {path} does not exist")
            elif fragment and resolved.suffix == ".md":
                if fragment not in anchors(resolved.read_text(encoding="utf-8")):
                    problems.append(f"{where}: ({target}): no heading #{fragment} there")
    return problems


def cited_problems(root: Path = ROOT) -> list[str]:
    """The repository paths README.md names in backticks that do not exist (a path whose
    first part is not a top-level entry of the repository is a path elsewhere: skipped)."""
    top = {p.name for p in root.iterdir()}
    problems = []
    for line in _prose((root / "README.md").read_text(encoding="utf-8")):
        for cited in _CITED.findall(line):
            if cited.split("/", 1)[0] not in top and not cited.startswith("test-artifacts/"):
                continue
            if cited.startswith(SCREENSHOTS.rstrip("/")):
                continue  # written by the browser tests (checked where a link names a file)
            if not (root / cited).exists():
                problems.append(f"README.md: `{cited}` does not exist")
    return problems


def _replace_table(text: str, header_line: str, table: str) -> str:
    """``text`` with the Markdown table starting at ``header_line`` replaced by ``table``."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == header_line)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "".join([*lines[:start], table, *lines[end:]])


def generated(root: Path = ROOT) -> list[tuple[Path, Callable[[str], str]]]:
    """Each generated file and how to bring its text up to date."""
    from coordinator.api.authorization import rule_table
    from gateway.openapi import render
    from gateway.routes import ROUTES
    from gateway.routes.rpcs import rest_rule_table
    from kernel.config_doc import HEADER, markdown_table
    from longtasks.domain.doc import TABLES, marker

    def operations(text: str) -> str:
        return _replace_table(text, HEADER, markdown_table())

    def tenancy(text: str) -> str:
        text = _replace_table(text, rule_table().splitlines()[0], rule_table())
        routes = {
            op.operation_id: (entry.method, op.path or entry.path)
            for entry in ROUTES
            for op in entry.operations
        }
        rest = rest_rule_table(routes)
        return _replace_table(text, rest.splitlines()[0], rest)

    def long_tasks(text: str) -> str:
        for name, table in TABLES.items():
            lines = text.splitlines(keepends=True)
            at = next(i for i, line in enumerate(lines) if line.rstrip("\n") == marker(name))
            text = _replace_table(text, lines[at + 1].rstrip("\n"), table())
        return text

    return [
        (root / "docs/operations.md", operations),
        (root / "docs/long-tasks.md", long_tasks),
        (root / "docs/tenancy.md", tenancy),
        (root / "gateway/openapi.json", lambda _: render()),
    ]


def generated_problems(root: Path = ROOT, write: bool = False) -> list[str]:
    problems = []
    for path, update in generated(root):
        text = path.read_text(encoding="utf-8")
        fresh = update(text)
        if fresh == text:
            continue
        if write:
            path.write_text(fresh, encoding="utf-8")
        else:
            problems.append(f"{path.relative_to(root)}: stale; `make docs-update` rewrites it")
    return problems


def main(argv: Iterable[str]) -> int:
    write = "--write" in argv
    problems = [*generated_problems(write=write), *link_problems(), *cited_problems()]
    for problem in problems:
        print(problem, file=sys.stderr)
    checked = len(documents())
    if problems:
        print(f"docs: {len(problems)} problem(s) in {checked} documents", file=sys.stderr)
        return 1
    print(f"docs: {checked} documents, their links and the generated parts are up to date")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
