"""A staticfiles finder that serves plotly.js from the installed `plotly` wheel (no CDN, no copy).

`{% static 'vendor/plotly.min.js' %}` resolves to `plotly/package_data/plotly.min.js`; collectstatic
copies it like any other static file, so production serves it from STATIC_ROOT.
"""
from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def plotly_js_path() -> Path:
    """The plotly.min.js shipped inside the installed plotly wheel (FileNotFoundError if absent)."""
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js not found at {path}; reinstall plotly (requirements.txt)")
    return path


class _VendorStorage(FileSystemStorage):
    """Storage rooted at plotly's package_data, exposing only plotly.min.js under vendor/."""


class PlotlyFinder(BaseFinder):
    """Finds `vendor/plotly.min.js` in the plotly wheel."""

    def check(self, **kwargs):
        try:
            plotly_js_path()
        except (ImportError, FileNotFoundError) as exc:
            return [Error(str(exc), id="telemetry.E001")]
        return []

    def find(self, path, find_all=False, **kwargs):
        find_all = find_all or kwargs.get("all", False)  # Django < 5.2 spelled it `all`
        if path != PLOTLY_STATIC_PATH:
            return [] if find_all else None
        found = str(plotly_js_path())
        return [found] if find_all else found

    def list(self, ignore_patterns):
        source = plotly_js_path()
        storage = _VendorStorage(location=str(source.parent))
        storage.prefix = "vendor"
        yield source.name, storage
