"""Admin pages of the registries. Adding one goes through the same service as the API (the check runs
before anything is saved, its error shown on the field); an entry's code or YAML is never edited in
place (delete and register again), only its description; delete and "check again" are audited."""
from django import forms
from django.contrib import admin, messages

from .inputs import RegistryNotPermitted, RegistryRefused
from .models import RewardFunction, ToolSet
from .services import (reward_function_check, reward_function_delete, reward_function_register, tool_set_check,
                       tool_set_delete, tool_set_register)


class _RegisterForm(forms.ModelForm):
    """Calls the registering service from clean(); the admin then shows the saved entry."""

    request_user = None
    registered = None

    def register(self, data: dict):  # pragma: no cover - each subclass registers its own kind
        raise NotImplementedError

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            self.registered = self.register(data)
        except RegistryRefused as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        except RegistryNotPermitted as exc:
            self.add_error(None, str(exc))
        return data

    def validate_unique(self):
        if self.registered is None:  # once registered, its own row is not a duplicate of itself
            super().validate_unique()


class _OptionalJSONField(forms.JSONField):
    """A JSON field whose "none given" shows as an empty box, as its help text says: Django's showed
    "null" in the new reward function's sample rows box (found looking at the admin's forms)."""

    def prepare_value(self, value):
        return "" if value is None or value == [] else super().prepare_value(value)


class RewardFunctionAddForm(_RegisterForm):
    sample_rows = _OptionalJSONField(required=False, help_text=(
        "Optional rows to check it on: [{data_source, solution_str, ground_truth, extra_info, expected}]; "
        "empty: a GSM8K-style and an arithmetic-style row."))

    class Meta:
        model = RewardFunction
        fields = ["name", "description", "kind", "path", "module", "function", "sample_rows"]

    def register(self, data):
        return reward_function_register(by=self.request_user, name=data["name"], kind=data["kind"],
                                        path=data.get("path") or "", module=data.get("module") or "",
                                        function=data.get("function") or "compute_score",
                                        description=data.get("description") or "",
                                        sample_rows=data.get("sample_rows"))


class ToolSetAddForm(_RegisterForm):
    class Meta:
        model = ToolSet
        fields = ["name", "description", "config_yaml"]

    def register(self, data):
        return tool_set_register(by=self.request_user, name=data["name"], config_yaml=data["config_yaml"],
                                 description=data.get("description") or "")


class _RegistryAdmin(admin.ModelAdmin):
    add_form = None
    check_service = delete_service = None
    editable = ("description",)
    actions = ["check_again"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = self.add_form
            form = super().get_form(request, obj, **kwargs)
            return type(form.__name__, (form,), {"request_user": request.user})
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return list(self.add_form._meta.fields)
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return [f.name for f in self.model._meta.fields if f.name not in self.editable and f.name != "id"]

    def save_form(self, request, form, change):
        return form.save(commit=False) if change else form.registered

    def save_model(self, request, obj, form, change):
        if change:  # only the description is editable
            obj.save(update_fields=list(self.editable))

    def save_related(self, request, form, formsets, change):
        if change:
            super().save_related(request, form, formsets, change)

    def delete_model(self, request, obj):
        self.delete_service(obj, request.user)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_service(obj, request.user)

    @admin.action(description="Check the selected entries again")
    def check_again(self, request, queryset):
        for obj in queryset:
            obj = self.check_service(obj, request.user)
            level = messages.SUCCESS if obj.status == obj.Status.READY else messages.ERROR
            self.message_user(request, f"{obj.name}: {obj.status}" + (f" ({obj.error})" if obj.error else ""), level)


@admin.register(RewardFunction)
class RewardFunctionAdmin(_RegistryAdmin):
    add_form = RewardFunctionAddForm
    list_display = ["name", "kind", "function", "status", "created_by", "checked", "created"]
    list_filter = ["status", "kind"]
    search_fields = ["name", "path", "module", "description"]

    @staticmethod
    def check_service(obj, user):
        return reward_function_check(reward_function=obj, by=user)

    @staticmethod
    def delete_service(obj, user):
        reward_function_delete(reward_function=obj, by=user)


@admin.register(ToolSet)
class ToolSetAdmin(_RegistryAdmin):
    add_form = ToolSetAddForm
    list_display = ["name", "status", "created_by", "checked", "created"]
    list_filter = ["status"]
    search_fields = ["name", "description"]

    @staticmethod
    def check_service(obj, user):
        return tool_set_check(tool_set=obj, by=user)

    @staticmethod
    def delete_service(obj, user):
        tool_set_delete(tool_set=obj, by=user)
