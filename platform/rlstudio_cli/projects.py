"""`rlstudio projects ...`: list (GET /api/v1/projects/, paged, `scope` mine or shared), create NAME
(POST with `name` and `description`), show ID (GET .../{id}/), edit ID (PATCH `name` and/or
`description`), delete ID (DELETE; its runs stay, in no project); share ID is sharing.py's. A project's runs are `rlstudio runs list --project ID`
(GET /api/v1/runs/?project=ID)."""
from __future__ import annotations

from .client import Client, ClientError
from .common import confirmed, emit_json, err, footer, out, paged, when
from .output import cell, clean, pairs, table


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


def cmd_projects_show(client: Client, args) -> int:
    p = client.get(f"projects/{args.id}/")
    if args.json:
        emit_json(p)
        return 0
    items = [("id", p.get("id")), ("name", p.get("name")), ("owner", p.get("owner")), ("access", p.get("access")),
             ("runs", p.get("run_count")), ("created", when(p.get("created")))]
    if p.get("access") in ("owner", "staff"):  # the API fills the sharing for them only
        items += [("shared with", p.get("shared_with") or "nobody"), ("teams", p.get("shared_with_teams") or "none")]
    pairs(items)
    if p.get("description"):
        out(f"\n{clean(p.get('description'), lines=True)}")
    return 0


def cmd_projects_edit(client: Client, args) -> int:
    body = {k: v for k, v in (("name", args.name), ("description", args.description)) if v is not None}
    if not body:
        raise ClientError("nothing to change: give --name and/or --description", field="--name", exit_code=2)
    p = client.request("PATCH", f"projects/{args.id}/", body=body)
    if args.json:
        emit_json(p)
    else:
        out(f"project {p.get('id')} {clean(p.get('name'))}: {' and '.join(body)} changed")
    return 0


def cmd_projects_delete(client: Client, args) -> int:
    def question() -> str:
        p = client.get(f"projects/{args.id}/")
        return (f"delete project {args.id} {clean(p.get('name'))}? Its {cell(p.get('run_count'))} run(s) stay, in no "
                "project, and whoever it is shared with no longer reads them.")

    if not confirmed(args, question, what="a project"):
        err(f"project {args.id} not deleted")
        return 1
    client.delete(f"projects/{args.id}/")
    out(f"project {args.id} deleted")
    return 0
