"""What uses a catalog object, as its deletion checks it: the runs app's Run (`run_model`, reached
without importing the runs app), the runs using an object, named as far as the deleting user may
see them (`used_by`), and the records of other apps that protect it (`protected_by`)."""
from __future__ import annotations

from collections import Counter

from django.db.models import ProtectedError

from ..models import Dataset


def run_model():
    """The runs app's Run, reached through the dataset's reverse relation (`runs`): runs depends on
    the catalog, so the catalog does not import it."""
    return Dataset._meta.get_field("runs").related_model


def used_by(runs, *, by) -> str:
    """'run(s): a, b' naming only the runs `by` may see, counting the others; '' when none."""
    from rlstudio.ownership import owned_by_or_staff

    total = runs.count()
    if not total:
        return ""
    visible = owned_by_or_staff(runs, user=by)
    names = list(visible.order_by("id").values_list("name", flat=True)[:20])
    others = total - visible.count()
    parts = names + ([f"{others} run(s) of other users"] if others else [])
    return f"run(s): {', '.join(parts)}"


def protected_by(exc: ProtectedError) -> str:
    """'2 sweep(s), 1 …' counting the records whose protected foreign key stopped a deletion (another
    app's, such as a sweep's dataset and model, which the catalog does not import)."""
    counts = Counter(str(obj._meta.verbose_name) for obj in exc.protected_objects)
    return ", ".join(f"{n} {name}(s)" for name, n in sorted(counts.items()))
