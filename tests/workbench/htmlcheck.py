"""A parsed HTML page, to check what a browser would find in it (elements, attributes, text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class ParsedPage:
    tags: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # every start tag, in order
    text: list[str] = field(default_factory=list)  # text nodes, unescaped

    def all(self, tag: str) -> list[dict[str, str]]:
        return [attrs for name, attrs in self.tags if name == tag]

    @property
    def handlers(self) -> list[tuple[str, str]]:
        """(tag, attribute) of every event-handler attribute (``onerror=``, ``onclick=`` …)."""
        return [(name, a) for name, attrs in self.tags for a in attrs if a.lower().startswith("on")]

    @property
    def urls(self) -> list[str]:
        """Every value of an attribute that loads or links something."""
        keys = ("src", "href", "srcset", "action", "formaction", "data", "poster", "background")
        return [v for _, attrs in self.tags for k, v in attrs.items() if k in keys]

    def joined_text(self) -> str:
        return "".join(self.text)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = ParsedPage()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.page.text.append(data)


def parse(document: str) -> ParsedPage:
    parser = _Parser()
    parser.feed(document)
    parser.close()
    return parser.page


def assert_inert(document: str) -> ParsedPage:
    """The page runs no script and loads nothing from outside: no ``<script>``, no handler attribute,
    no URL but ``data:`` images, the CSP meta that forbids script, no ``http(s)://`` in any attribute."""
    page = parse(document)
    assert page.all("script") == []
    assert page.handlers == []
    assert all(url.startswith("data:image/") for url in page.urls), page.urls
    assert page.all("a") == [] and page.all("iframe") == [] and page.all("object") == []
    for _, attrs in page.tags:
        assert not any("http:" in v.lower() or "https:" in v.lower() for v in attrs.values()), attrs
    csp = [m for m in page.all("meta") if m.get("http-equiv", "").lower() == "content-security-policy"]
    assert len(csp) == 1 and "default-src 'none'" in csp[0]["content"] and "script-src" not in csp[0]["content"]
    return page
