#!/usr/bin/env python3
"""Checks every relative link and #anchor in the README, the crates' READMEs, BENCHMARKS.md
and the guide (docs/): the file must exist, the anchor must be a heading of it, and a
link from the book must stay inside docs/ (the built book holds nothing else).
Exits 1 listing each broken link. Usage: python3 scripts/check-links.py"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text):
    """The lines outside fenced code blocks: number, the line, the line with its inline
    code spans blanked (links inside them are examples, not links)."""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, line, re.sub(r"`[^`]*`", "``", line)


def anchors(path):
    """The ids mdBook and GitHub give the file's headings: the text (code spans
    included, markup dropped) in lowercase, punctuation removed, spaces as hyphens."""
    ids = set()
    for _, line, _ in prose(path.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).replace("`", "").lower())
            ids.add(text.strip().replace(" ", "-"))
    return ids


def files():
    yield ROOT / "README.md"
    yield ROOT / "BENCHMARKS.md"
    yield from sorted(ROOT.glob("*/README.md"))
    yield from sorted(p for p in DOCS.rglob("*.md") if "book" not in p.relative_to(DOCS).parts)


def main():
    broken = []
    for source in files():
        for number, _, line in prose(source.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                resolved = (source.parent / path).resolve() if path else source
                where = f"{source.relative_to(ROOT)}:{number}: {target}"
                if not resolved.exists():
                    broken.append(f"{where}: no such file")
                elif DOCS in source.parents and DOCS not in resolved.parents:
                    broken.append(f"{where}: leaves docs/, so the built book cannot follow it")
                elif anchor and (resolved.is_dir() or anchor not in anchors(resolved)):
                    broken.append(f"{where}: no heading with this anchor")
    for line in broken:
        print(line, file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
