"""The README and the docs link only to files that exist in the repository, and docs/README.md
indexes every document."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_in_the_repository(document: Path) -> None:
    broken = []
    for target in LINK.findall(document.read_text()):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        resolved = (document.parent / target.split("#", 1)[0]).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)} links to what the repository does not hold: {broken}"


def test_the_docs_index_lists_every_document() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    missing = [
        path.name
        for path in (ROOT / "docs").glob("*.md")
        if path.name != "README.md" and f"]({path.name})" not in index
    ]
    assert not missing, missing


def test_the_readme_fits_a_first_read() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
