"""Check every link between the pages of a built HTML site: its file exists, and so does
its anchor (``id="..."``). Run by ``scripts/docs.sh build`` after Sphinx's own link check,
which follows only links to other sites (none reachable here, so ignored).

    python scripts/docs_links.py docs/_build/html
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    """The ids and the hrefs of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if name == "href" and value and tag == "a":
                self.hrefs.append(value)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(root: Path) -> list[str]:
    """``page: href`` for each internal link whose file or anchor does not exist."""
    pages = {path: parse(path) for path in root.rglob("*.html")}
    broken = []
    for path, page in sorted(pages.items()):
        for href in page.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue  # another site
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(root)}: {href} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(root)}: {href} (no such anchor)")
    return broken


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "docs/_build/html").resolve()
    broken = broken_links(root)
    for line in broken:
        print(f"broken link: {line}")
    count = sum(len(parse(path).hrefs) for path in root.rglob("*.html"))
    print(f"docs_links.py: {count} links in {root}, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
