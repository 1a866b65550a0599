"""The repository stands alone: nothing in it points at notes outside it, and every link it makes resolves.

A reader has the tracked files and nothing else, so no tracked file (this one aside: it names what it
looks for) may mention the notes a session kept beside the repository (`../shared`) or cite them by
section (`reference §`). Every Markdown link of README.md and docs/*.md must name a tracked file, and a
`#fragment` a heading of that file; every `docs/<name>.md` named in prose or code must exist.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
OUTSIDE_NOTES = ("../shared", "reference §")
# [text](target), the target without spaces; images (![..](..)) are links too.
MARKDOWN_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
# A repository path to a doc, not the tail of another project's path (some/docs/x.md).
DOC_PATH = re.compile(r"(?<![\w/.-])docs/[\w.-]+\.md\b")
HEADING = re.compile(r"^#{1,6} +(?P<title>.+?) *#*$", re.MULTILINE)


def tracked_files() -> list[str]:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in listing.stdout.decode().split("\0") if name]


def text_of(name: str) -> str | None:
    path = ROOT / name
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    title = re.sub(r"[`*_]", "", title.strip().lower())
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def broken_links(name: str, text: str, files: set[str]) -> list[str]:
    broken = []
    base = (ROOT / name).parent
    for match in MARKDOWN_LINK.finditer(text):
        target = match.group("target")
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        path_part, _, fragment = target.partition("#")
        file = (base / path_part).resolve() if path_part else ROOT / name
        relative = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else None
        line = text.count("\n", 0, match.start()) + 1
        if relative is None or (relative not in files and not any(f.startswith(relative + "/") for f in files)):
            broken.append(f"{name}:{line}: {target} (no such file in the repository)")
        elif fragment and relative.endswith(".md"):
            headings = {slug(h.group("title")) for h in HEADING.finditer(text_of(relative) or "")}
            if fragment not in headings:
                broken.append(f"{name}:{line}: {target} (no heading #{fragment} in {relative})")
    return broken


def test_no_file_points_at_notes_outside_the_repository() -> None:
    found = []
    for name in tracked_files():
        text = text_of(name)
        if name == THIS or text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{number}: {needle!r}" for needle in OUTSIDE_NOTES if needle in line]
    assert found == []


def test_markdown_links_resolve_inside_the_repository() -> None:
    files = set(tracked_files())
    documents = ["README.md", *sorted(name for name in files if re.fullmatch(r"docs/[^/]+\.md", name))]
    broken = []
    for name in documents:
        broken += broken_links(name, text_of(name) or "", files)
    assert broken == []


def test_named_docs_exist() -> None:
    files = set(tracked_files())
    missing = []
    for name in sorted(files):
        text = text_of(name)
        if text is None:
            continue
        missing += [f"{name}: {path}" for path in sorted(set(DOC_PATH.findall(text))) if path not in files]
    assert missing == []
