"""`rlstudio projects list` (GET /api/v1/projects/, paged, `scope` mine or shared) and `projects
create NAME` (POST /api/v1/projects/ with `name` and `description`). A project's runs are
`rlstudio runs list --project ID` (GET /api/v1/runs/?project=ID)."""
from __future__ import annotations

from .client import Client
from .common import emit_json, footer, out, paged, when
from .output import clean, table


def cmd_projects_list(client: Client, args) -> int:
    rows, count = paged(client, "projects/", args, scope=args.scope)
    if args.json:
        emit_json({"count": count, "results": rows})
        return 0
    table(("ID", "NAME", "OWNER", "RUNS", "ACCESS", "DESCRIPTION", "CREATED"),
          [(p.get("id"), p.get("name"), p.get("owner"), p.get("run_count"), p.get("access"), p.get("description"),
            when(p.get("created"))) for p in rows])
    footer(len(rows), count, args)
    return 0


def cmd_projects_create(client: Client, args) -> int:
    body = {"name": args.name}
    if args.description is not None:
        body["description"] = args.description
    project = client.post("projects/", body)
    if args.json:
        emit_json(project)
    else:
        out(f"project {project.get('id')} {clean(project.get('name'))}")
    return 0
