"""The README and the docs: short, every relative link resolving, and the reference pages what the code says."""

from __future__ import annotations

import re
import sys

import pytest

from tests.helpers.paths import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def pages() -> list:
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "bench" / "results").glob("*.md")),
    ]


def test_the_readme_is_a_guide_of_at_most_200_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file(page):
    targets = [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t)]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(REPO)} links to missing files: {missing}"


def test_the_generated_pages_are_what_the_schema_the_parser_and_the_results_give():
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import reference
    finally:
        sys.path.remove(str(REPO / "docs"))
    for path, text in reference.generated().items():
        assert path.read_text() == text, f"run python docs/reference.py: {path.relative_to(REPO)} differs"
    recipe = reference.recipe_page()
    assert "## [models.NAME.inputs.NAME]" in recipe and "## [[builds]]" in recipe
    assert "| `trials_per_task` | int | `64` |" in recipe
    assert "## modelbuild build" in reference.cli_page() and "`-j, --jobs`" in reference.cli_page()
    benchmarks = reference.benchmarks_page()
    assert "| 2026-12-07 | 20261207 | d664a19 | AMD EPYC, 2 | 173 | 199 of 200 | 0.55x | 1.70x | 34.80x |" in benchmarks
