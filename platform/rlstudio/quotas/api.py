"""API view of quotas: GET /api/v1/quota/ (the caller's quota and usage now)."""
from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from .selectors import quota_usage_for
from .serializers import QuotaUsageSerializer


class QuotaView(APIView):
    """The caller's GPU quota next to what they hold now and used this month."""

    @extend_schema(responses=QuotaUsageSerializer)
    def get(self, request):
        usage = quota_usage_for(user=request.user)
        return Response(QuotaUsageSerializer(asdict(usage)).data)
