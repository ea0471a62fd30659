"""API view of quotas: GET /api/v1/quota/ (the caller's quota and usage now, and their quota'd teams')."""
from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from .serializers import QuotaUsageSerializer
from .team_quotas import quota_usage_with_teams


class QuotaView(APIView):
    """The caller's GPU quota next to what they hold now and used this month, and the same of each of
    their teams that has a team quota (never another team's)."""

    @extend_schema(responses=QuotaUsageSerializer)
    def get(self, request):
        usage = quota_usage_with_teams(user=request.user)
        return Response(QuotaUsageSerializer(asdict(usage)).data)
