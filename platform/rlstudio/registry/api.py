"""API views of the registries: /api/v1/reward-functions/ and /api/v1/tool-sets/, by name.

Any signed-in user lists and reads the ready entries (what a run may choose); staff register (POST,
the check runs before anything is saved), check again (POST <name>/check/) and delete. The registry's
domain errors become HTTP here: RegistryRefused 400 naming the field, RegistryNotPermitted 403."""
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.response import Response

from rlstudio.api.errors import ApiError
from rlstudio.api.params import ListParamsMixin

from .inputs import RegistryNotPermitted, RegistryRefused
from .models import NAME_PATTERN
from .selectors import reward_function_get_for, reward_function_list_for, tool_set_get_for, tool_set_list_for
from .serializers import (RewardFunctionRegisterSerializer, RewardFunctionSerializer, RewardFunctionStaffSerializer,
                          ToolSetRegisterSerializer, ToolSetSerializer, ToolSetStaffSerializer)
from .services import (reward_function_check, reward_function_delete, reward_function_register, tool_set_check,
                       tool_set_delete, tool_set_register)


def _http(exc: Exception) -> ApiError:
    if isinstance(exc, RegistryNotPermitted):
        return ApiError(str(exc), code="permission_denied", status_code=403)
    return ApiError(exc.message, code=exc.code, field=exc.field)


class _RegistryViewSet(ListParamsMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin,
                       viewsets.ReadOnlyModelViewSet):
    lookup_field = "name"
    lookup_value_regex = NAME_PATTERN
    pagination_class = None  # an operator's short list
    read_serializer = staff_serializer = register_serializer = None

    def get_permissions(self):
        if self.action in ("list", "retrieve"):
            return [IsAuthenticated()]
        return [IsAuthenticated(), IsAdminUser()]

    def get_serializer_class(self):
        if self.action == "create":
            return self.register_serializer
        user = getattr(self.request, "user", None)
        return self.staff_serializer if getattr(user, "is_staff", False) else self.read_serializer

    def _call(self, fn, **kwargs):
        try:
            return fn(by=self.request.user, **kwargs)
        except (RegistryRefused, RegistryNotPermitted) as exc:
            raise _http(exc) from None

    def _created(self, obj):
        return Response(self.staff_serializer(obj).data, status=status.HTTP_201_CREATED)


class RewardFunctionViewSet(_RegistryViewSet):
    """Operator-registered reward functions; a run chooses one by name (`reward.name`)."""

    read_serializer, staff_serializer = RewardFunctionSerializer, RewardFunctionStaffSerializer
    register_serializer = RewardFunctionRegisterSerializer

    def get_queryset(self):
        return reward_function_list_for(user=self.request.user)

    def get_object(self):
        return reward_function_get_for(user=self.request.user, name=self.kwargs["name"])

    def create(self, request, *args, **kwargs):
        data = RewardFunctionRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._created(self._call(reward_function_register, **data.validated_data))

    def perform_destroy(self, instance):
        self._call(reward_function_delete, reward_function=instance)

    @action(detail=True, methods=["post"], url_path="check")
    def recheck(self, request, name=None):
        """Check it again: ready with new scores, or broken with the error."""
        reward = self._call(reward_function_check, reward_function=self.get_object())
        return Response(RewardFunctionStaffSerializer(reward).data)


class ToolSetViewSet(_RegistryViewSet):
    """Operator-registered tool sets (verl tool-config YAML); a run chooses one by name (`tool_set`)."""

    read_serializer, staff_serializer = ToolSetSerializer, ToolSetStaffSerializer
    register_serializer = ToolSetRegisterSerializer

    def get_queryset(self):
        return tool_set_list_for(user=self.request.user)

    def get_object(self):
        return tool_set_get_for(user=self.request.user, name=self.kwargs["name"])

    def create(self, request, *args, **kwargs):
        data = ToolSetRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._created(self._call(tool_set_register, **data.validated_data))

    def perform_destroy(self, instance):
        self._call(tool_set_delete, tool_set=instance)

    @action(detail=True, methods=["post"], url_path="check")
    def recheck(self, request, name=None):
        """Build its tools again: ready, or broken with the error."""
        tool_set = self._call(tool_set_check, tool_set=self.get_object())
        return Response(ToolSetStaffSerializer(tool_set).data)
