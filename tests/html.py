"""Reading a page like its reader: one small HTML tree for every page test.

Built on the stdlib ``html.parser`` (no parser library is installed). ``parse(markup)`` gives
the document; ``select``/``one`` find elements by tag, class and attributes; ``text`` is what
a reader sees, whitespace collapsed. SVG elements are elements like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Protocol


class _HasContent(Protocol):
    @property
    def content(self) -> bytes: ...


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def raw_text(self) -> str:
        return "".join(child if isinstance(child, str) else child.raw_text() for child in self.children)

    @property
    def text(self) -> str:
        """The visible text, whitespace collapsed (timesince's no-break spaces included)."""
        return " ".join(self.raw_text().split())

    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def select(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        """Descendants (and self) by tag, class and attributes (``data_status`` means ``data-status``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [
            el
            for el in self.iter()
            if (tag is None or el.tag == tag)
            and (cls is None or cls in el.classes())
            and all(el.attrs.get(name) == value for name, value in wanted.items())
        ]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.select(tag, cls, **attrs)
        assert len(found) == 1, f"expected one {tag or '*'}.{cls} {attrs}, found {len(found)}"
        return found[0]

    def by_id(self, ident: str) -> Element:
        return self.one(id=ident)

    def has_id(self, ident: str) -> bool:
        return bool(self.select(id=ident))

    def text_of(self, ident: str) -> str:
        """The text of the element with id ``ident``."""
        return self.by_id(ident).text

    def definitions(self) -> dict[str, Element]:
        """The terms of this definition list (or of the lists under it): each ``<dt>`` text to the
        ``<dd>`` after it, in document order."""
        pairs: dict[str, Element] = {}
        term: str | None = None
        for el in self.iter():
            if el.tag == "dt":
                term = el.text
            elif el.tag == "dd" and term is not None:
                assert term not in pairs, f"the term {term!r} is defined twice"
                pairs[term] = el
                term = None
        return pairs

    def rows(self, ident: str) -> list[list[str]]:
        """The body rows of the table with id ``ident``, as lists of cell texts."""
        return [
            [cell.text for cell in row.iter() if cell.tag in ("td", "th")]
            for body in self.by_id(ident).select("tbody")
            for row in body.select("tr")
        ]


class _TreeBuilder(HTMLParser):
    VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(markup: str | bytes) -> Element:
    """The document tree of ``markup`` (tag and attribute names lower-case, as the parser gives them:
    SVG's ``viewBox`` is ``viewbox``)."""
    builder = _TreeBuilder()
    builder.feed(markup.decode() if isinstance(markup, bytes) else markup)
    builder.close()
    return builder.root


def doc(response: _HasContent) -> Element:
    """The document tree of a test-client response."""
    return parse(response.content)
