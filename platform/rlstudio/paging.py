"""Paging of the list pages (runs, datasets, models): a page of a queryset by `?page=`, and the links to
the pages around it that keep the page's other query parameters (filters, sort)."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import QueryDict

from rlstudio.text import ascii_uint

PER_PAGE = 50


@dataclass(frozen=True)
class PageLink:
    """One link of the pager: its label, its query string (None: no link, e.g. the page shown)."""

    label: str
    query: str | None
    current: bool = False


@dataclass(frozen=True)
class Paged:
    """A page of rows and what the template's pager shows: links, and "rows a to b of n"."""

    page: Page
    links: list[PageLink]

    @property
    def rows(self):
        return self.page.object_list

    @property
    def summary(self) -> str:
        n = self.page.paginator.count
        if self.page.paginator.num_pages <= 1:
            return f"{n:,}"
        return f"{self.page.start_index():,}–{self.page.end_index():,} of {n:,}"


def page_number(get: QueryDict) -> int:
    """?page= as a page number (1 when absent or not a positive integer; past the end is the last page)."""
    number = ascii_uint((get.get("page") or "").strip(), max_digits=9)
    return number if number else 1


def paged(queryset: QuerySet, get: QueryDict, *, per_page: int | None = None) -> Paged:
    """The page `?page=` asks for (the last one when it asks past the end) and the pager's links: first,
    previous, up to two pages either side, next, last; each keeps the other query parameters. `per_page`
    defaults to PER_PAGE."""
    paginator = Paginator(queryset, per_page or PER_PAGE)
    page = paginator.get_page(page_number(get))
    keep = [(k, v) for k, values in get.lists() if k != "page" for v in values]

    def query(n: int) -> str:
        return urlencode([*keep, ("page", n)] if n > 1 else keep)

    last, here = paginator.num_pages, page.number
    links: list[PageLink] = []
    if last > 1:
        links.append(PageLink("« first", query(1) if here > 1 else None))
        links.append(PageLink("‹ previous", query(here - 1) if here > 1 else None))
        for n in range(max(1, here - 2), min(last, here + 2) + 1):
            links.append(PageLink(str(n), None if n == here else query(n), current=n == here))
        links.append(PageLink("next ›", query(here + 1) if here < last else None))
        links.append(PageLink("last »", query(last) if here < last else None))
    return Paged(page=page, links=links)
