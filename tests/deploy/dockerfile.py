"""A small Dockerfile reader: instructions with their arguments, line continuations joined,
stages split at FROM. Enough for the checks in test_image.py, not a full parser."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str

    def words(self) -> list[str]:
        """The arguments as words: the JSON (exec) form or the shell form."""
        if self.args.startswith("["):
            return [str(w) for w in json.loads(self.args)]
        return shlex.split(self.args)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def instructions(path: Path) -> list[Instruction]:
    found: list[Instruction] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        found.append(Instruction(keyword.upper(), " ".join(args.split())))
        pending = ""
    return found


def stages(path: Path) -> list[Stage]:
    result: list[Stage] = []
    for instruction in instructions(path):
        if instruction.keyword == "FROM":
            words = instruction.words()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            result.append(Stage(words[0], name))
        elif result:
            result[-1].instructions.append(instruction)
    return result
