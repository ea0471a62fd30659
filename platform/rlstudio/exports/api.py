"""API views of exports: /api/v1/runs/{id}/exports/ (GET list, POST create), /runs/{id}/exports/{eid}/
(GET, DELETE) and /runs/{id}/exports/{eid}/archive/ (GET: the folder as a .tar.gz, streamed). Reading and
downloading follow the run (owner, shared readers, staff; anyone else 404); asking for an export or
deleting one needs the run's owner or staff (a reader gets 403 before the body is looked at)."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status as http
from rest_framework.response import Response
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.api.params import list_params
from rlstudio.archive import archive_size, tar_gz_response
from rlstudio.runs.launch import inside, run_folder

from .selectors import export_get_for, export_list_for
from .serializers import ExportCreateSerializer, ExportSerializer
from .services import MAX_ARCHIVE_BYTES, ExportInvalid, ExportRefused, export_delete, export_folder, export_new


def _not_permitted(exc) -> ApiError:
    return ApiError(exc.message, code="permission_denied", field=exc.field, status_code=http.HTTP_403_FORBIDDEN)


class RunExportsView(APIView):
    @list_params(paged=False, responses=ExportSerializer(many=True), operation_id="runs_exports_list")
    def get(self, request, run_id: int):
        """A run's exports (Hugging Face folders made from its checkpoints), newest first."""
        _run, qs = export_list_for(user=request.user, run_id=run_id)
        return Response(ExportSerializer(qs[:100], many=True, context={"request": request}).data)

    @extend_schema(request=ExportCreateSerializer, responses={202: ExportSerializer, 200: ExportSerializer},
                   operation_id="runs_exports_create")
    def post(self, request, run_id: int):
        """Export one of a run's checkpoints (step) as a Hugging Face folder, registered as a model."""
        from rlstudio.runs.services import RunNotPermitted, check_can_manage

        run, _qs = export_list_for(user=request.user, run_id=run_id)
        try:
            check_can_manage(user=request.user, run=run, action="export")
            export, queued = export_new(user=request.user, run=run,
                                        data=request.data if isinstance(request.data, dict) else {})
        except RunNotPermitted as exc:
            raise _not_permitted(exc) from None
        except ExportInvalid as exc:
            raise ApiError(str(exc), field=exc.field) from None
        except ExportRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        return Response(ExportSerializer(export, context={"request": request}).data,
                        status=http.HTTP_202_ACCEPTED if queued else http.HTTP_200_OK)


class RunExportDetailView(APIView):
    @extend_schema(responses=ExportSerializer, operation_id="runs_exports_retrieve")
    def get(self, request, run_id: int, export_id: int):
        """One export of a run: its state, files, size and the catalog model it became."""
        export = export_get_for(user=request.user, run_id=run_id, export_id=export_id)
        return Response(ExportSerializer(export, context={"request": request}).data)

    @extend_schema(responses={204: None}, operation_id="runs_exports_destroy")
    def delete(self, request, run_id: int, export_id: int):
        """Delete an export: its folder and its catalog model (not while a run uses that model)."""
        from rlstudio.catalog.errors import CatalogRefused
        from rlstudio.runs.services import RunNotPermitted

        export = export_get_for(user=request.user, run_id=run_id, export_id=export_id)
        try:
            export_delete(user=request.user, export=export)
        except RunNotPermitted as exc:
            raise _not_permitted(exc) from None
        except ExportRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        except CatalogRefused as exc:  # its model is used by runs (CatalogInUse)
            raise ApiError(exc.message, code=exc.code, status_code=http.HTTP_409_CONFLICT) from None
        return Response(status=http.HTTP_204_NO_CONTENT)


class RunExportArchiveView(APIView):
    @extend_schema(responses={(200, "application/gzip"): OpenApiResponse(OpenApiTypes.BINARY,
                                                                          description="the export as a .tar.gz")},
                   operation_id="runs_exports_archive")
    def get(self, request, run_id: int, export_id: int):
        """A succeeded export's folder as a .tar.gz, made while it downloads."""
        export = export_get_for(user=request.user, run_id=run_id, export_id=export_id)
        if export.status != "succeeded":
            raise ApiError(f"export {export.pk} is {export.status}: only a succeeded export has an archive",
                           code="conflict", status_code=http.HTTP_409_CONFLICT)
        folder = export_folder(export.run, export.step)
        if not folder.is_dir() or not inside(folder, run_folder(export.run)):
            raise ApiError(f"the folder of export {export.pk} is no longer in the run's folder",
                           code="gone", status_code=http.HTTP_410_GONE)
        size = archive_size(folder)
        if size > MAX_ARCHIVE_BYTES:
            raise ApiError(f"export {export.pk} holds {size} bytes, more than the {MAX_ARCHIVE_BYTES} bytes served as "
                           "an archive; ask an operator for the folder", code="too_large",
                           status_code=http.HTTP_409_CONFLICT)
        return tar_gz_response(request, folder, f"run{export.run_id}-step{export.step}")
