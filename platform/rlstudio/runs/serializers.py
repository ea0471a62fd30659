"""API representations of runs and saved configs."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import MAX_NOTE_LENGTH, MAX_TAG_LENGTH, MAX_TAGS, Run, RunConfig, RunVisibility
from .selectors import (
    can_manage,
    fork_origin,
    latest_reward,
    run_access,
    run_checkpoint_for,
    run_config_for,
    run_error_log_for,
    run_project_for,
    run_queue_reason_for,
)


class RunConfigSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = RunConfig
        fields = ["id", "name", "owner", "description", "config", "created"]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    error = serializers.CharField(read_only=True, help_text=(
        "Why a failed or lost run ended (no server paths: a path in it reads [path])."))
    error_log = serializers.SerializerMethodField(help_text=(
        "A failed run's job log tail or the trainer's traceback, which name server paths (the owner and "
        "staff; empty for a reader)."))
    checkpoint = serializers.SerializerMethodField(
        help_text="The last checkpoint's path (the owner and staff; empty for a reader).")
    queue_reason = serializers.SerializerMethodField(help_text=(
        "Why a queued run waits ('' when it does not); a reason naming its owner's team reads, for a reader "
        "(not the owner or staff), \"waiting for a team quota of its owner's\"."))
    latest_metrics = serializers.SerializerMethodField()
    latest_reward = serializers.SerializerMethodField()
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    access = serializers.SerializerMethodField(
        help_text="Why the caller sees the run: owner, staff, or shared (read-only: no controls).")
    shared_with = serializers.SerializerMethodField(
        help_text="Usernames the run is shared with (shown to its owner and staff; empty for others).")
    shared_with_teams = serializers.SerializerMethodField(
        help_text="Names of the teams the run is shared with (shown to its owner and staff; empty for others).")
    project = serializers.SerializerMethodField(help_text=(
        "The project the run is in, {id, name} (null: none, or one the caller does not see)."))

    class Meta:
        model = Run
        fields = [
            "id", "name", "owner", "status", "queue_reason", "step", "total_steps", "latest_reward",
            "latest_metrics", "gpus", "dataset", "val_dataset", "model", "reward_model", "created", "started",
            "finished", "last_heartbeat", "error", "error_log", "checkpoint", "parent", "parent_kind", "tool_set",
            "tags", "note", "visibility", "shared_with", "shared_with_teams", "access", "project",
        ]
        read_only_fields = fields

    def _user(self):
        request = self.context.get("request")
        return getattr(request, "user", None)

    def get_access(self, run: Run) -> str:
        return run_access(user=self._user(), run=run)

    @extend_schema_field(OpenApiTypes.STR)
    def get_checkpoint(self, run: Run) -> str:
        return run_checkpoint_for(user=self._user(), run=run)

    @extend_schema_field(OpenApiTypes.STR)
    def get_error_log(self, run: Run) -> str:
        return run_error_log_for(user=self._user(), run=run)

    @extend_schema_field(OpenApiTypes.STR)
    def get_queue_reason(self, run: Run) -> str:
        return run_queue_reason_for(user=self._user(), run=run)

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_shared_with(self, run: Run) -> list[str]:
        user = self._user()
        if user is None or not can_manage(user=user, run=run):
            return []
        return sorted(u.get_username() for u in run.shared_with.all())

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_shared_with_teams(self, run: Run) -> list[str]:
        user = self._user()
        if user is None or not can_manage(user=user, run=run):
            return []
        return sorted(team.name for team in run.shared_with_teams.all())

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"}}})
    def get_project(self, run: Run) -> dict | None:
        user = self._user()
        if user is None:
            return None
        cache = self.context.setdefault("_shared_projects", {})  # read once per answer, not per run
        if "ids" not in cache and run.project_id is not None and not can_manage(user=user, run=run):
            from .selectors import project_ids_shared_with

            cache["ids"] = project_ids_shared_with(user)
        return run_project_for(user=user, run=run, shared_projects=cache.get("ids", set()))

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_latest_metrics(self, run: Run) -> dict | None:
        return getattr(run, "latest_metrics", None)

    @extend_schema_field(OpenApiTypes.DOUBLE)
    def get_latest_reward(self, run: Run) -> float | None:
        return latest_reward(run)


class RunDetailSerializer(RunSerializer):
    """A run with its frozen config snapshot: whole for its owner and staff, without the platform's
    keys (server paths) for a reader (`selectors.run_config_for`)."""

    config = serializers.SerializerMethodField(
        help_text="The frozen config (for a reader: the platform's keys reset to the schema's defaults).")
    fork = serializers.SerializerMethodField(help_text=(
        "A fork's origin: {step, changes: [{key, old, new}]} (old null for a caller who reads neither the "
        "parent nor the fork's controls); null for any other run."))

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["config", "fork"]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_config(self, run: Run) -> dict:
        return run_config_for(user=self._user(), run=run)

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "step": {"type": "integer", "nullable": True},
        "changes": {"type": "array", "nullable": True, "items": {"type": "object", "properties": {
            "key": {"type": "string"}, "old": {}, "new": {}}}}}})
    def get_fork(self, run: Run) -> dict | None:
        origin = fork_origin(run=run, user=self._user())
        return None if origin is None else {"step": origin["step"], "changes": origin["changes"]}


class RunCreatedSerializer(RunDetailSerializer):
    """The answer to POST /api/v1/runs/: the run, and the trainer's warnings about its config ([{field,
    message}], e.g. GRPO with rollout.n=1 has no baseline). A warning never refuses a run."""

    warnings = serializers.SerializerMethodField()

    class Meta(RunDetailSerializer.Meta):
        fields = RunDetailSerializer.Meta.fields + ["warnings"]
        read_only_fields = fields

    @extend_schema_field({"type": "array", "items": {"type": "object", "properties": {
        "field": {"type": "string"}, "message": {"type": "string"}}}})
    def get_warnings(self, run: Run) -> list[dict[str, str]]:
        from .preview import warnings

        return warnings(run.config)


def _id_field(**kwargs) -> serializers.IntegerField:
    """A referenced object's id: an integer from 1 (0 is no id: a 400 on the field, never "absent")."""
    return serializers.IntegerField(min_value=1, **kwargs)


def check_overrides(value):
    """`overrides` as the API takes them: an object of dotted keys or a list of "key=value" (JSON null:
    none). Anything else, such as 0 or "", is a 400 on `overrides`, not "no overrides"."""
    if value is not None and not isinstance(value, (dict, list)):
        raise serializers.ValidationError(
            f"must be an object of dotted keys or a list of key=value, got {type(value).__name__} {value!r}"[:200])
    return value


class RunCreateSerializer(serializers.Serializer):
    """POST /api/v1/runs/: what to train, on what, with which config (docs/api.md).

    The config is one of `preset`, `config` and `config_id` (none: the default preset); two of them
    are ambiguous, a 400 on the second."""

    name = serializers.CharField(max_length=200)
    dataset = _id_field()
    val_dataset = _id_field(required=False, allow_null=True)
    model = _id_field()
    reward_model_id = _id_field(
        required=False, allow_null=True,
        help_text="A catalog reward model (kind reward) the run scores with; turns reward_model.enable on.")
    preset = serializers.CharField(required=False, allow_blank=True, help_text="A trainer recipe name.")
    config = serializers.JSONField(required=False, allow_null=True, help_text="A whole trainer config (object).")
    config_id = _id_field(required=False, allow_null=True, help_text="A saved config.")
    overrides = serializers.JSONField(required=False, allow_null=True,
                                      help_text='{"actor_rollout_ref.rollout.n": 8, ...}',
                                      validators=[check_overrides])
    gpus = serializers.IntegerField(min_value=0, max_value=1024, default=0)
    tool_set = serializers.CharField(max_length=64, required=False, allow_blank=True,
                                     help_text="An operator-registered tool set, by name (GET /api/v1/tool-sets/).")
    project = _id_field(required=False, allow_null=True,
                        help_text="One of the caller's projects to put the run in (GET /api/v1/projects/).")

    def validate_config(self, value):
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError(f"must be an object (a whole trainer config), got {type(value).__name__}")
        if value == {}:
            raise serializers.ValidationError("an empty object is no config: give a whole trainer config, or leave "
                                              "config out for a preset")
        return value

    def validate(self, attrs):
        given = [f for f in ("preset", "config", "config_id") if attrs.get(f) not in (None, "")]
        if len(given) > 1:
            raise serializers.ValidationError({given[1]: (
                f"give one of preset, config and config_id, not {' and '.join(given)}: which config is meant "
                "is ambiguous (overrides then change the one given)")})
        return attrs


RETENTION_HELP = ('The run\'s sample retention, {"mode": "all" | "per_step" | "every_kth_step", "k": N} (k from 1, '
                  "default 1), as PUT /api/v1/runs/{id}/retention/ takes it; absent or null: keep every sample.")


class RunLaunchSerializer(RunCreateSerializer):
    """POST /api/v1/runs/: RunCreateSerializer's fields (which a sweep's launch shares), the run's
    sample retention and its tags, checked by `services.run_new` (a 400 on retention.mode,
    retention.k or tags)."""

    retention = serializers.JSONField(required=False, allow_null=True, help_text=RETENTION_HELP)
    tags = serializers.JSONField(required=False, allow_null=True, help_text=(
        "The run's tags, a list of strings (letters, digits and _ . : + / -, as PATCH takes them); "
        "absent or null: none."))


class RunStopSerializer(serializers.Serializer):
    checkpoint = serializers.BooleanField(default=True, help_text="Finish the step and save a checkpoint first.")
    force = serializers.BooleanField(default=False, help_text="Kill the run now.")


class RunBulkDeleteSerializer(serializers.Serializer):
    """The body of POST /api/v1/runs/bulk-delete/ (described here; `services.clean_run_ids` checks it)."""

    ids = serializers.ListField(child=serializers.IntegerField(min_value=1),
                                help_text="The runs to delete: 1 to RLSTUDIO_RUNS_BULK_DELETE_MAX distinct ids.")


class RunBulkDeletedSerializer(serializers.Serializer):
    """The answer of a bulk delete that deleted every run asked for."""

    deleted = serializers.ListField(child=serializers.IntegerField(), help_text="The ids deleted, as given.")


class RunCloneSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    overrides = serializers.JSONField(required=False, allow_null=True, validators=[check_overrides])
    retention = serializers.JSONField(required=False, allow_null=True, help_text=(
        "The new run's sample retention, as a launch takes it; absent or null: the source run's."))


class RunForkSerializer(serializers.Serializer):
    """POST /api/v1/runs/{id}/fork/: which kept checkpoint, the new run's name, the changed keys."""

    step = serializers.IntegerField(required=False, allow_null=True, min_value=0,
                                    help_text="A kept checkpoint's step (global_step_N); null or absent: the newest.")
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    overrides = serializers.JSONField(required=False, allow_null=True, validators=[check_overrides],
                                      help_text="Dotted keys a fork may change (trainer.config.fork), through the gate.")
    retention = serializers.JSONField(required=False, allow_null=True, help_text=(
        "The fork's sample retention, as a launch takes it; absent or null: the source run's."))


class RunConfigCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=MAX_NOTE_LENGTH,
                                        help_text=f"Free text, at most {MAX_NOTE_LENGTH} characters (as a run's note).")
    config = serializers.JSONField()
    gpus = serializers.IntegerField(required=False, min_value=0, max_value=4096, default=0,
                                    help_text="check the config as a run on this many GPUs would be (0: the CPU)")


class PresetSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    config = serializers.JSONField()


class RunCheckpointsSerializer(serializers.Serializer):
    """GET /api/v1/runs/{id}/checkpoints/: the global steps of the run's kept checkpoints."""

    run = serializers.IntegerField()
    steps = serializers.ListField(child=serializers.IntegerField(), help_text=(
        "The steps of the committed global_step_N folders in the run's own folder, oldest first: what an "
        "evaluation's checkpoints, an export's step and a fork's step take."))
    latest = serializers.IntegerField(allow_null=True, help_text="The newest of them (null: none kept).")


class RunLogsSerializer(serializers.Serializer):
    lines = serializers.ListField(child=serializers.CharField(allow_blank=True))
    source = serializers.CharField(help_text="ray (the job's driver log) or unavailable")
    message = serializers.CharField(allow_blank=True)


class RunUpdateSerializer(serializers.Serializer):
    """PATCH /api/v1/runs/{id}/: the run's tags, note and project, nothing else (owner or staff)."""

    # Lengths are checked by the service (runs/services/sharing.py), which names the tag at fault.
    tags = serializers.ListField(child=serializers.CharField(allow_blank=True, trim_whitespace=False),
                                 required=False, help_text=(
                                     f"The whole list of tags (replaces the old one): at most {MAX_TAGS}, each 1 "
                                     f"to {MAX_TAG_LENGTH} letters, digits or _ . : + / -."))
    note = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                 help_text=f"Free text, at most {MAX_NOTE_LENGTH} characters.")
    project = serializers.IntegerField(required=False, allow_null=True, min_value=1, help_text=(
        "A project of the run's owner to move the run into (its id), or null to take it out of its project."))


def _names_field(help_text: str) -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(trim_whitespace=False), required=False,
                                 max_length=500, help_text=help_text)


class SharingChangeSerializer(serializers.Serializer):
    """PATCH .../sharing/ of a run or a project: names added to and taken from who reads it, applied at
    once under the object's lock (no read-then-write: a change made meanwhile by someone else stays)."""

    add_users = _names_field("Usernames to share with (each an active user, not the owner).")
    remove_users = _names_field("Usernames to stop sharing with (one it is not shared with changes nothing).")
    add_teams = _names_field("Team names to share with (each a team the caller is in; staff: any team).")
    remove_teams = _names_field("Team names to stop sharing with (one it is not shared with changes nothing).")

    NAME_FIELDS = ("add_users", "remove_users", "add_teams", "remove_teams")

    @staticmethod
    def field_of(service_field: str | None) -> str | None:
        """The field of this request a sharing service's error on `users` / `teams` came in: only the
        names added are checked there."""
        return {"users": "add_users", "teams": "add_teams"}.get(service_field or "", service_field)

    def validate(self, attrs):
        # A key this PATCH does not take (PUT's `users`, a typo, a project's `visibility`) is refused, not
        # dropped while the rest is applied (as the run's own PATCH does).
        extra = sorted(set(self.initial_data) - set(self.fields)) if hasattr(self.initial_data, "keys") else []
        if extra:
            raise serializers.ValidationError({extra[0]: f"{extra[0]!r} is not a field of this change (it takes {', '.join(self.fields)})"})
        if not any(attrs.get(name) for name in self.NAME_FIELDS) and attrs.get("visibility") is None:
            first = "visibility, " if "visibility" in self.fields else ""
            raise serializers.ValidationError(
                {"add_users": f"nothing to change: give {first}add_users, remove_users, add_teams or remove_teams"})
        for added, removed in (("add_users", "remove_users"), ("add_teams", "remove_teams")):
            both = sorted({str(n).strip() for n in attrs.get(added) or ()} &
                          {str(n).strip() for n in attrs.get(removed) or ()})
            if both:
                raise serializers.ValidationError({removed: f"{', '.join(both)} is also in {added}: give each once"})
        return attrs


class RunSharingChangeSerializer(SharingChangeSerializer):
    """PATCH /api/v1/runs/{id}/sharing/: the run's visibility and names added or taken away."""

    visibility = serializers.ChoiceField(choices=RunVisibility.values, required=False,
                                         help_text="private (the owner, staff and its readers by name or team) or everyone.")


class RunSharingSerializer(serializers.Serializer):
    """GET / PUT /api/v1/runs/{id}/sharing/: who reads the run besides its owner and staff."""

    visibility = serializers.ChoiceField(choices=RunVisibility.values, required=False,
                                         help_text="private (the owner, staff and `users`) or everyone.")
    users = serializers.ListField(child=serializers.CharField(), required=False,
                                  help_text="The whole list of usernames the run is shared with (replaces it).")
    teams = serializers.ListField(child=serializers.CharField(trim_whitespace=False), required=False, help_text=(
        "The whole list of team names the run is shared with (replaces it): each a team the caller is in "
        "(staff: any team) or one it is shared with already; any other is a 400 on `teams`."))
