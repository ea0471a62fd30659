"""A run's TensorBoard logs as one download: `GET /api/v1/runs/{id}/tensorboard.tar.gz` (docs/api.md).

The trainer's `tensorboard` sink (trainer/sinks.py) writes its event files under
`<the run's folder>/tensorboard_log/<project>/<experiment>/`; this serves that `tensorboard_log` folder
whole, streamed as a .tar.gz by `rlstudio.archive` (links skipped, never followed). The folder comes from
the run's own record (`run_folder`, what the platform froze at submit), never from the request, and is
served only while it is a real folder inside the run's folder. Whoever may read the run may download
it (else 404); a run with no event file there answers 404 saying so.
"""
from __future__ import annotations

from pathlib import Path

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status as http
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.archive import archive_files, archive_size, tar_gz_response
from rlstudio.runs.launch import inside, run_folder

from .selectors import run_visible

FOLDER = "tensorboard_log"  # the sink's folder under the run's out_dir (trainer/sinks.py TensorBoardSink)
EVENT_FILE_MARK = "tfevents"  # TensorBoard names its event files events.out.tfevents.<time>.<host>...
MAX_BYTES = 4 * 2**30  # the largest log folder served (file bytes before compression); scalars are small


def tensorboard_folder(run) -> Path | None:
    """The run's `tensorboard_log` folder when it is a real folder (not a link) inside the run's folder
    and holds at least one TensorBoard event file; else None."""
    root = run_folder(run)
    folder = root / FOLDER
    try:
        if folder.is_symlink() or not folder.is_dir() or not inside(folder, root):
            return None
        if any(EVENT_FILE_MARK in p.name for p in archive_files(folder)):
            return folder
    except OSError:
        return None
    return None


class RunTensorBoardView(APIView):
    """The run's TensorBoard event files as a .tar.gz, for whoever may read the run (else 404)."""

    @extend_schema(responses={(200, "application/gzip"): OpenApiResponse(
        OpenApiTypes.BINARY, description="the run's tensorboard_log folder as a .tar.gz")},
        operation_id="runs_tensorboard_archive")
    def get(self, request, run_id: int):
        run = run_visible(user=request.user, run_id=run_id)
        folder = tensorboard_folder(run)
        if folder is None:
            raise ApiError(f"run {run.pk} has no TensorBoard files: its trainer.logger did not list tensorboard, "
                           "or it has written none yet", code="not_found", status_code=http.HTTP_404_NOT_FOUND)
        size = archive_size(folder)
        if size > MAX_BYTES:
            raise ApiError(f"the TensorBoard files of run {run.pk} hold {size} bytes, more than the {MAX_BYTES} "
                           "bytes served as an archive; ask an operator for the folder", code="too_large",
                           status_code=http.HTTP_409_CONFLICT)
        return tar_gz_response(request, folder, f"run{run.pk}-tensorboard")
