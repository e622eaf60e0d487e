"""``kbatch schemas ROOT``: list the subjects, versions and schema ids a backup's ``_schemas`` topic holds.

One line per subject version (subject, version, id, language, state: ``live``, ``deleted`` (soft)
or ``purged`` (permanently deleted; its id still decodes old data)), then a summary; ``--json``
prints the same as one JSON document. What the replay skipped is said on stderr; a root without
the topic is one line naming the topics it has, status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kbatch.values import DEFAULT_TOPIC, Registry, RegistryError

__all__ = ["add_arguments", "run"]

_STATES = {"live": "live", "soft": "deleted", "hard": "purged", "id": "by id"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``kbatch schemas``' arguments to ``parser``."""
    parser.add_argument("root", help="a log.dirs root, a backup (with --recursive), the _schemas-0 directory, or a URL")
    parser.add_argument("--recursive", action="store_true",
                        help="search ROOT at any depth (a backup of several brokers)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--topic", default=DEFAULT_TOPIC,
                        help=f"the registry's topic (kafkastore.topic, default {DEFAULT_TOPIC})")


def _rows(registry: Registry) -> list[dict[str, Any]]:
    rows = []
    for schema, state, offset in registry.listing():
        rows.append({
            "subject": schema.subject, "version": schema.version, "id": schema.id,
            "schemaType": schema.schema_type, "state": _STATES[state], "deleted": state in ("soft", "hard"),
            "references": [r.to_json() for r in schema.references], "offset": offset,
        })
    return rows


def run(args: argparse.Namespace) -> int:
    """List the registry's subject versions; return 0, or 1 with one line when there is no topic."""
    try:
        registry = Registry.from_log_dirs(args.root, recursive=args.recursive, topic=args.topic)
    except RegistryError as exc:
        print(f"kbatch schemas: error: {exc}", file=sys.stderr)
        return 1
    rows = _rows(registry)
    for note in registry.notes:
        print(f"kbatch schemas: note: {note}", file=sys.stderr)
    subjects = sorted({r["subject"] for r in rows if r["subject"] is not None})
    ids = sorted({r["id"] for r in rows if r["id"] is not None})
    if args.json:
        print(json.dumps({"root": str(args.root), "topic": args.topic, "subjects": subjects, "versions": rows,
                          "ids": ids, "records": registry.keytypes, "notes": registry.notes}, indent=2))
        return 0
    if rows:
        width = max(len("SUBJECT"), *(len(str(r["subject"])) for r in rows))
        print(f"{'SUBJECT':<{width}}  {'VERSION':>7}  {'ID':>7}  {'TYPE':<8}  STATE")
        for r in rows:
            refs = f"  references {', '.join(x['name'] for x in r['references'])}" if r["references"] else ""
            version = "-" if r["version"] is None else r["version"]
            print(f"{r['subject'] or '-':<{width}}  {version:>7}  {r['id']:>7}  {r['schemaType']:<8}  "
                  f"{r['state']}{refs}")
    live = sum(r["state"] == "live" for r in rows)
    read = ", ".join(f"{n} {k}" for k, n in sorted(registry.keytypes.items())) or "none"
    print(f"{len(subjects)} subjects, {len(rows)} versions ({live} live), {len(ids)} schema ids "
          f"in {args.topic} under {args.root} (records: {read})")
    return 0
