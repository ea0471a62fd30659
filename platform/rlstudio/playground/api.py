"""API views of the playground: POST /api/v1/playground/sessions/ (create), GET .../{id}/ and
POST .../{id}/stop/. A session is its owner's (staff read every one); another user's is 404, and so is a
target the user may not see."""
from drf_spectacular.utils import extend_schema
from rest_framework import status as http
from rest_framework.response import Response
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError

from .selectors import session_get_for
from .serializers import SessionCreateSerializer, SessionSerializer
from .services import PlaygroundInvalid, PlaygroundRefused, TargetNotFound, session_new, session_stop


class SessionsView(APIView):
    @extend_schema(request=SessionCreateSerializer, responses={202: SessionSerializer},
                   operation_id="playground_sessions_create")
    def post(self, request):
        """Send a message to one or two targets (a model or a checkpoint); the answer streams over the session's websocket."""
        try:
            session = session_new(user=request.user, data=request.data)
        except TargetNotFound as exc:
            raise ApiError(str(exc), code="not_found", field=exc.field, status_code=http.HTTP_404_NOT_FOUND) from None
        except PlaygroundInvalid as exc:
            raise ApiError(str(exc), field=exc.field) from None
        except PlaygroundRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        return Response(SessionSerializer(session).data, status=http.HTTP_202_ACCEPTED)


class SessionDetailView(APIView):
    @extend_schema(responses=SessionSerializer, operation_id="playground_sessions_retrieve")
    def get(self, request, session_id: int):
        """One playground session of yours: its targets, messages, settings, state and each target's answer."""
        return Response(SessionSerializer(session_get_for(user=request.user, session_id=session_id)).data)


class SessionStopView(APIView):
    @extend_schema(request=None, responses={202: SessionSerializer}, operation_id="playground_sessions_stop")
    def post(self, request, session_id: int):
        """Stop a playground session's answer."""
        session = session_get_for(user=request.user, session_id=session_id)
        try:
            session = session_stop(user=request.user, session=session)
        except PlaygroundRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        return Response(SessionSerializer(session).data, status=http.HTTP_202_ACCEPTED)
