"""The documentation holds together: README stays a short front door, and every
relative link in README.md and docs/*.md reaches a file and, with a #fragment,
a heading of it (GitHub's anchor rules); docs/api.md's metadata example, run against the app, finds
what it stores."""

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


def test_api_md_metadata_example_finds_what_its_own_lines_store(core):
    """docs/api.md's metadata example run against the app: what its capture line stores (煤球三岁了, topic
    pets), its list and its search with the filter find — the search asked "cat" of a memory in Chinese
    and found nothing."""
    import json
    from urllib.parse import parse_qsl

    from fastapi.testclient import TestClient

    from gateway.config import TenantSettings, load_settings
    from gateway.http.app import create_app
    from gateway.pipeline import Pipeline

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    block = re.search(r"\*\*Metadata\*\*.*?```sh\n(.*?)```", text, re.DOTALL).group(1)
    calls = re.findall(r"""^curl -s( -G)? "\$\{H\[@\]\}" \$B(/\S+) (-d|--data-urlencode) '(.*)'$""", block, re.M)
    assert len(calls) == 4, block
    base = re.search(r"B=http://127\.0\.0\.1:8080(/v1/subjects/\S+)", text).group(1)
    s = load_settings(tenants={"default": TenantSettings()})
    with TestClient(create_app(s, pipeline=Pipeline(s, core)), client=("127.0.0.1", 50000)) as client:
        answers = []
        for get, path, flag, body in calls:
            if get:
                r = client.get(base + path, params=dict(parse_qsl(body)))
            else:
                r = client.post(base + path, json=json.loads(body))
            assert r.status_code == 200, (path, r.text)
            answers.append(r.json())
    stored, listed, searched, either = answers
    (result,) = stored["results"]
    assert result["action"] == "stored" and result["memory"]["metadata"]["topic"] == "pets"
    memory_id = result["memory"]["id"]
    assert [m["id"] for m in listed["items"]] == [memory_id]
    assert [h["memory"]["id"] for h in searched["hits"]] == [memory_id]
    assert [h["memory"]["id"] for h in either["hits"]] == [memory_id]  # $or and a threshold it passes
