"""The SQL of each aggregate has one home (issues 16 and 31): every table's home is a module (or a
few, named for what they do) under ``store/``; a module outside a table's home never builds an INSERT,
UPDATE or DELETE on it, and reads it only where ``READ_ALLOW`` says why; and no module outside
``store/`` holds SQL at all (no table, no statement text, no SQLAlchemy statement builder).

Walked from the source with ``ast``: a table is seen wherever its ``Table`` object is named (imported from
the schema modules, reached as ``schema.<table>``, or given another name by assignment) and in any
string that reads like SQL on it, so a new statement anywhere in src/ is caught whatever builds it.
docs/architecture.md ("SQL homes") lists the homes and the exceptions below.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import switchboard

PACKAGE = Path(switchboard.__file__).parent
SCHEMA_MODULES = {
    "switchboard.store.schema",
    "switchboard.store.schema_a2a",
    "switchboard.store.schema_cluster",
    "switchboard.store.schema_console",
    "switchboard.store.schema_web",
}
DECLARED_IN = ("store/schema*.py",)  # where the tables are declared (not statements)

# table -> the modules that are its home (paths relative to src/switchboard). Every table has one.
HOMES: dict[str, tuple[str, ...]] = {
    "todos": ("store/todo*.py",),  # todos + todo_moves + todo_reads + todo_queries: one aggregate, split
    "todo_events": ("store/todo*.py",),  # a todo's timeline, written by its moves
    "endpoints": ("store/accounts.py",),
    "endpoint_epoch": ("store/changes.py",),  # read only; the SQLite triggers on endpoints write it
    "humans": ("store/accounts.py", "store/admin.py"),  # sign-up and sign-in; the operator's changes
    "human_invites": ("store/admin.py",),
    "sources": ("store/sources.py",),
    "routes": ("store/sources.py",),
    # rows + health fold + counts and owner, and notify_hooks_sqlite (SQLite's text of its hot reads)
    "notify_hooks": ("store/notify_hook*.py",),
    "notify_deliveries": ("store/notify_deliveries.py",),
    "a2a_tasks": ("store/a2a_tasks.py",),
    "a2a_task_events": ("store/a2a_tasks.py",),
    "push_notification_configs": ("store/push_configs.py",),
    "a2a_push_outbox": ("store/push_outbox.py",),
    "a2a_endpoint_settings": ("store/a2a_settings.py",),
    "rate_buckets": ("store/windows.py",),
    "backlog_samples": ("store/console.py",),
    "web_sessions": ("store/web_sessions.py",),
    # MCP OAuth: one aggregate, split for the module-size bound (oauth_clients.py: the clients)
    "oauth_clients": ("store/oauth*.py",),
    "oauth_codes": ("store/oauth*.py",),
    "oauth_grants": ("store/oauth*.py",),
    "oauth_tokens": ("store/oauth*.py",),
}

# Reads outside a table's home, each with why it stays. The test fails on an entry that is no longer
# needed, so this list only shrinks. Writes have no exceptions.
READ_ALLOW: dict[tuple[str, str], str] = {
    ("store/a2a_tasks.py", "todos"): (
        "an A2A task is its a2a_tasks row joined to its todo (status, result, times), read and locked in "
        "one statement; split over two homes it would be two trips and no longer one locked read"
    ),
    ("store/web_sessions.py", "humans"): (
        "every page view reads the human a session cookie names, joined to the session in one "
        "indexed statement; split over two homes it would be two trips per request"
    ),
    ("store/notify_hooks.py", "endpoints"): (
        "matching reads each endpoint (scope, presence, owner) with its enabled hooks in one batched "
        "statement on the delivery path: split over two homes it would be two trips per batch"
    ),
    (
        "store/notify_hooks_sqlite.py",
        "endpoints",
    ): "the same matching read, as SQLite text (see store/notify_hooks.py's entry)",
    ("store/console.py", "todos"): (
        "the console's read model: the human's todos joined to their endpoints (scope, slug) in one paged "
        "statement; either home taking it would read the other's table"
    ),
    ("store/console.py", "endpoints"): "the console's read model (see its todos entry)",
    ("store/console.py", "todo_events"): "the console's read model: a todo's timeline, paged with it",
}

_VERBS = {
    "insert": "insert",
    "update": "update",
    "delete": "delete",
    "pg_insert": "insert",
    "sqlite_insert": "insert",
}
# SQL keywords in capitals only: "reads from sources" in a docstring is prose, not a statement.
_SQL = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|FROM|JOIN)\s+\"?(\w+)\"?")


@dataclass
class Use:
    writes: set[str] = field(default_factory=set)  # tables written
    reads: set[str] = field(default_factory=set)  # tables named anywhere (writes included)


def table_uses(tree: ast.Module, tables: set[str]) -> Use:
    """What one module does with ``tables``."""
    names: dict[str, str] = {}  # local name -> table
    modules: set[str] = set()  # local names of the schema modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in SCHEMA_MODULES:
            names.update({a.asname or a.name: a.name for a in node.names if a.name in tables})
        elif isinstance(node, ast.ImportFrom) and node.module == "switchboard.store":
            modules.update(
                a.asname or a.name for a in node.names if f"switchboard.store.{a.name}" in SCHEMA_MODULES
            )
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name in SCHEMA_MODULES and a.asname)
    changed = True
    while changed:  # ``cfg = push_notification_configs``: an alias is the table too
        changed = False
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                table = _table(node.value, names, modules)
                if table is not None and node.targets[0].id not in names:
                    names[node.targets[0].id] = table
                    changed = True
    use = Use()
    for node in ast.walk(tree):
        table = _table(node, names, modules) if isinstance(node, ast.Name | ast.Attribute) else None
        if table is not None:
            use.reads.add(table)
        if isinstance(node, ast.Call):
            written = _written(node, names, modules)
            if written is not None:
                use.writes.add(written)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for verb, name in _SQL.findall(node.value):
                if name.lower() in tables:
                    use.reads.add(name.lower())
                    if not verb.upper().endswith(("FROM", "JOIN")) or verb.upper().startswith("DELETE"):
                        use.writes.add(name.lower())
    return use


def _table(node: ast.AST, names: dict[str, str], modules: set[str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
        return node.attr if node.attr in HOMES else None
    return None


def _written(call: ast.Call, names: dict[str, str], modules: set[str]) -> str | None:
    func = call.func
    verb = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if verb not in _VERBS:
        return None
    if call.args and (table := _table(call.args[0], names, modules)) is not None:
        return table  # insert(todos), sqlalchemy.update(todos), pg_insert(todos)
    if isinstance(func, ast.Attribute):
        return _table(func.value, names, modules)  # todos.insert(), todos.delete()
    return None


def outside_homes(root: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(module, table) pairs that write, and that read, a table outside its home."""
    writes: set[tuple[str, str]] = set()
    reads: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "migrations" in path.parts or any(fnmatch(rel, p) for p in DECLARED_IN):
            continue
        use = table_uses(ast.parse(path.read_text(), str(path)), set(HOMES))
        for table in use.reads | use.writes:
            if any(fnmatch(rel, home) for home in HOMES[table]):
                continue
            (writes if table in use.writes else reads).add((rel, table))
    return writes, reads


def test_no_module_outside_a_tables_home_writes_it() -> None:
    writes, _ = outside_homes(PACKAGE)
    assert writes == set(), "statements that write a table outside its home (move them there): " + ", ".join(
        f"{m} writes {t}" for m, t in sorted(writes)
    )


def test_reads_outside_a_home_are_the_listed_exceptions_only() -> None:
    writes, reads = outside_homes(PACKAGE)
    unlisted = reads - set(READ_ALLOW)
    assert unlisted == set(), (
        "reads outside the table's home (move them, or list them with why): "
        + ", ".join(f"{m} reads {t}" for m, t in sorted(unlisted))
    )
    stale = set(READ_ALLOW) - reads - writes
    assert stale == set(), f"exceptions no longer needed (remove them here and in docs): {sorted(stale)}"


def test_every_home_exists_and_holds_its_table() -> None:
    for table, homes in HOMES.items():
        found = [
            p
            for p in PACKAGE.rglob("*.py")
            if any(fnmatch(p.relative_to(PACKAGE).as_posix(), h) for h in homes)
        ]
        assert found, f"no home module for {table}"
        assert any(table in table_uses(ast.parse(p.read_text()), {table}).reads for p in found), table


def test_every_table_has_a_home_under_store() -> None:
    from switchboard.store.tables import metadata

    assert set(metadata.tables) == set(HOMES), "a table without a home here, or a home without a table"
    for table, homes in HOMES.items():
        for home in homes:
            modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob(home)}
            assert home.startswith("store/"), f"{table}: {home} is not in store/"
            assert all(m.startswith("store/") for m in modules), f"{table}: {home} reaches outside store/"


# Capitals only (the tree writes SQL keywords so), and a statement's shape, not the word: "DELETE"
# alone is an HTTP method.
_STATEMENT = re.compile(
    r"^\s*(SELECT\s+\S|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|WITH\s+(RECURSIVE\s+)?\w+\s+AS\b"
    r"|CREATE\s|ALTER\s+TABLE\s|DROP\s|PRAGMA\s|BEGIN\b|COMMIT\b|ROLLBACK\b|SAVEPOINT\s)"
)
# The modules that declare tables: only store/ names them.
_DECLARATIONS = SCHEMA_MODULES | {"switchboard.store.tables"}
# What a face or feature may take from SQLAlchemy: its errors and the connection type it passes on.
_SQLALCHEMY_ALLOWED = {"sqlalchemy.exc", "sqlalchemy.ext.asyncio"}


def sql_outside_store(root: Path) -> set[tuple[str, str]]:
    """(module, what) for each piece of SQL in a module outside store/ (and outside the allowance)."""
    found: set[tuple[str, str]] = set()
    tables = set(HOMES)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("store/"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        found.update((rel, f"table {t}") for t in table_uses(tree, tables).reads)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _STATEMENT.match(node.value)
            ):
                found.add((rel, f"statement {node.value.split()[0]}"))
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                top = node.module.split(".")[0]
                if top == "sqlalchemy" and node.module not in _SQLALCHEMY_ALLOWED:
                    found.add((rel, f"import from {node.module}"))
                if node.module in _DECLARATIONS:
                    found.add((rel, f"import from {node.module}"))
                if node.module == "switchboard.store":
                    found.update(
                        (rel, f"import {a.name}")
                        for a in node.names
                        if f"switchboard.store.{a.name}" in _DECLARATIONS
                    )
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "sqlalchemy" and alias.name not in _SQLALCHEMY_ALLOWED:
                        found.add((rel, f"import {alias.name}"))
                    if alias.name in _DECLARATIONS:
                        found.add((rel, f"import {alias.name}"))
    return found


def test_no_sql_outside_store() -> None:
    found = sql_outside_store(PACKAGE)
    assert found == set(), "SQL outside store/ (move it into the table's home there): " + ", ".join(
        f"{m}: {w}" for m, w in sorted(found)
    )


def test_the_walk_finds_sql_outside_store(tmp_path: Path) -> None:
    cases = {
        "face/named.py": "from switchboard.store.schema import todos\nselect(todos.c.id)\n",
        "face/raw.py": 'conn.exec_driver_sql("SELECT id FROM somewhere")\n',
        "face/builder.py": "from sqlalchemy import select\n",
        "face/pg.py": "from sqlalchemy.dialects.postgresql import insert\n",
        "face/every.py": "from switchboard.store.tables import metadata\n",
        "face/module.py": "from switchboard.store import schema_web\n",
        "face/clean.py": (
            "from sqlalchemy.exc import SQLAlchemyError\nfrom sqlalchemy.ext.asyncio import AsyncConnection\n"
            'method = "DELETE"\nlabel = "Select a queue"\n'
        ),
        "store/home.py": "from sqlalchemy import select\nQ = 'SELECT 1'\n",
        "notify/store.py": "from sqlalchemy import select\n",  # a feature package holds no SQL either
    }
    for name, text in cases.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert sql_outside_store(tmp_path) == {
        ("face/named.py", "table todos"),
        ("face/named.py", "import from switchboard.store.schema"),
        ("face/raw.py", "statement SELECT"),
        ("face/builder.py", "import from sqlalchemy"),
        ("face/pg.py", "import from sqlalchemy.dialects.postgresql"),
        ("face/every.py", "import from switchboard.store.tables"),
        ("face/module.py", "import schema_web"),
        ("notify/store.py", "import from sqlalchemy"),
    }


def test_the_walk_sees_each_way_of_naming_a_table(tmp_path: Path) -> None:
    """The checker itself: each of these would slip past a check that only looked for one spelling."""
    cases = {
        "direct.py": "from switchboard.store.schema import todos\nupdate(todos).values(x=1)\n",
        "aliased.py": "from switchboard.store.schema import todos as t\nq = t\nq.delete()\n",
        "module.py": "from switchboard.store import schema\nsa.insert(schema.endpoints)\n",
        "dialect.py": "from switchboard.store.schema import sources\npg_insert(sources).on_conflict_do_nothing()\n",
        "raw.py": 'conn.exec_driver_sql("UPDATE notify_hooks SET enabled = false")\n',
        "reader.py": "from switchboard.store.schema_a2a import push_notification_configs as c\nselect(c.c.id)\n",
        "store/todo_x.py": "from switchboard.store.schema import todos\nupdate(todos)\n",  # a todos home
    }
    for name, text in cases.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    writes, reads = outside_homes(tmp_path)
    assert writes == {
        ("direct.py", "todos"),
        ("aliased.py", "todos"),
        ("module.py", "endpoints"),
        ("dialect.py", "sources"),
        ("raw.py", "notify_hooks"),
    }
    assert reads == {("reader.py", "push_notification_configs")}
