"""Sorting of the catalog's list pages (datasets, models) by a column: `?sort=key`, `?sort=-key`
descending, as the runs list sorts (runs/selectors.py RUN_SORTS). A sort value that is not a column's
key falls back to the page's default (never an error); the pager (paging.py) keeps `sort` in its links.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.db.models.expressions import Combinable


@dataclass(frozen=True)
class SortColumn:
    """A column that sorts: its header's label, the expression it orders by, whether the first click
    sorts it descending (dates, counts, sizes), and whether it holds numbers (right-aligned)."""

    label: str
    expr: Callable[[], Combinable]
    desc_first: bool = False
    num: bool = False


@dataclass(frozen=True)
class SortHeader:
    """A column's header on the page: its label, the query of its link, its aria-sort, numbers or not."""

    key: str
    label: str
    query: str
    aria: str
    num: bool


def sort_param(raw: str | None, columns: Mapping[str, SortColumn], default: str) -> str:
    """`?sort=` when it names a column (`key` or `-key`), else `default`."""
    raw = (raw or "").strip()
    return raw if raw and raw.lstrip("-") in columns and raw.count("-") <= 1 else default


def sorted_by(queryset: QuerySet, columns: Mapping[str, SortColumn], sort: str) -> QuerySet:
    """`queryset` ordered by the column `sort` names (nulls last either way), ties by id."""
    desc = sort.startswith("-")
    expr = columns[sort.lstrip("-")].expr()
    return queryset.order_by(expr.desc(nulls_last=True) if desc else expr.asc(nulls_last=True),
                             "-id" if desc else "id")


def sort_headers(sort: str, columns: Mapping[str, SortColumn]) -> list[SortHeader]:
    """Each column's header: its link sorts the other way when it is the sort, else its first way."""
    out = []
    for key, col in columns.items():
        if sort.lstrip("-") == key:
            desc = sort.startswith("-")
            nxt, aria = (key if desc else f"-{key}"), ("descending" if desc else "ascending")
        else:
            nxt, aria = (f"-{key}" if col.desc_first else key), "none"
        out.append(SortHeader(key=key, label=col.label, query=urlencode({"sort": nxt}), aria=aria, num=col.num))
    return out
