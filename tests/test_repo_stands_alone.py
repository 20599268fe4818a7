"""The repository stands alone: nothing in it cites a design file or research notes that
are not in it, and every citation of the in-repo design pages names a section they have."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SCANNED = ("src", "tests", "bench", "docs")
TOP_FILES = ("pyproject.toml", "README.md")
# Built from pieces so this file does not match itself.
_OUTSIDE = re.compile(
    "|".join(
        (
            r"DESIGN" + r"\.md",
            r"DESIGN" + r" §",
            r"cli-" + r"formats",
            r"\.\./" + r"shared",
            r"/work/" + r"shared",
            r"\bADR" + r"[- ]?[0-9]{4}",  # the seed's decision records, not in the repository
        )
    )
)
DESIGN = ROOT / "docs" / "design.md"
CLI_FORMATS = ROOT / "tests" / "fixtures" / "cli" / "README.md"
_CITATION = {
    DESIGN: re.compile(r"docs/design\.md\s+((?:§[0-9.]+[,–\s]*)+)"),
    CLI_FORMATS: re.compile(r"tests/fixtures/cli/README\.md\s+((?:§[0-9.]+[,–\s]*)+)"),
}


def text_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path
    for name in TOP_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace")


def sections(doc: Path) -> set[str]:
    """ "5", "1.9", … for each heading `## 5. …` / `### 1.9 …` of `doc`."""
    return set(re.findall(r"^#{2,3} ([0-9]+(?:\.[0-9]+)*)\.? ", read(doc), re.M))


def test_nothing_cites_files_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in text_files()
        for n, line in enumerate(read(path).splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert found == []


@pytest.mark.parametrize("doc", list(_CITATION), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_citation_names_a_section_the_page_has(doc: Path) -> None:
    have = sections(doc)
    assert have, f"{doc} has no numbered sections"
    cited: dict[str, set[str]] = {}
    for path in text_files():
        text = re.sub(r"\s*\n\s*#?\s*", " ", read(path))  # citations wrap across lines
        for refs in _CITATION[doc].findall(text):
            for ref in re.findall(r"§([0-9]+(?:\.[0-9]+)*)", refs):
                cited.setdefault(ref, set()).add(str(path.relative_to(ROOT)))
    assert cited, f"nothing cites {doc}"
    missing = {ref: sorted(paths) for ref, paths in cited.items() if ref not in have}
    assert missing == {}
