"""The documentation holds together: README stays a short front door, and every
relative link in README.md and docs/*.md reaches a file and, with a #fragment,
a heading of it (GitHub's anchor rules)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _without_code(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def anchors(path: Path) -> set[str]:
    """The fragment of every heading of ``path``, as GitHub makes them: lower case, punctuation dropped,
    spaces to hyphens, a repeated heading suffixed -1, -2…"""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _without_code(path.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_readme_is_a_front_door():
    """README is read in five minutes: at most 300 lines, and it links to every document in docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for page in PAGES[1:]:
        assert f"(docs/{page.name}" in readme, f"README does not link to docs/{page.name}"


def test_relative_links_reach_a_file_and_a_heading():
    """No relative link in README.md or docs/*.md points at a missing file or a heading that is not there."""
    broken = []
    for page in PAGES:
        for target in LINK.findall(_without_code(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, fragment = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == [], broken
