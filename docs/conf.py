"""Sphinx configuration of the sa-inbox documentation (``scripts/docs.sh`` builds and serves it).

Built with warnings as errors and nitpicky references (``sphinx-build -W --keep-going -n``,
run by ``tests/docs/test_build.py``): every cross-reference must resolve. The intersphinx
inventories are files of the repository (``_inventories/``, see ``README.md`` here):
the build reads no network.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext import intersphinx

from sa_inbox import __version__

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_inventories"))

from make_inventories import INVENTORIES  # noqa: E402

#: Packages whose objects are linked by identity (``resolve_other_name``).
LINKED_PACKAGES = ("sa_inbox", "sqlalchemy", "alembic")

project = "sa-inbox"
author = "the sa-inbox authors"
copyright = "the sa-inbox authors, MIT licence"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx_click",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "README.md", "_inventories", "examples"]
root_doc = "index"

# ---------------------------------------------------------------- MyST

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # links to a page's sections: [text](page.md#a-heading)

# ---------------------------------------------------------------- references

nitpicky = True
smartquotes = False  # `--autogenerate` stays two hyphens, as typed in a terminal
default_role = "py:obj"

#: Libraries the docstrings name whose inventories are not in the repository: a reference to
#: one of them renders as code, unlinked, instead of failing the build. Python, SQLAlchemy and
#: Alembic are linked (``intersphinx_mapping``); everything of sa-inbox must resolve.
UNLINKED_LIBRARIES = (
    "aio_pika",
    "aiobotocore",
    "aiokafka",
    "aiormq",
    "boto3",
    "botocore",
    "cimpl",
    "confluent_kafka",
    "jinja2",
    "starlette",
    "uvicorn",
    "celery",
    "click",
    "faststream",
    "greenlet",
    "nats",
    "opentelemetry",
    "pika",
    "prometheus_client",
    "redis",
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(UNLINKED_LIBRARIES)})(\..*)?"),
]
nitpick_ignore = [
    ("py:exc", "alembic.util.CommandError"),  # Alembic's documentation has no entry for it
    # libraries without an inventory here, named by their short names in signatures
    ("py:exc", "KafkaException"),
    ("py:exc", "KafkaError"),
    ("py:class", "Starlette"),
    ("py:class", "Jinja2Templates"),
    ("py:class", "sa.Engine"),
]

intersphinx_mapping = {
    "python": ("https://docs.python.org/3.11/", str(HERE / "_inventories" / "python.inv")),
    "sqlalchemy": (
        "https://docs.sqlalchemy.org/en/20/",
        str(HERE / "_inventories" / "sqlalchemy.inv"),
    ),
    "alembic": (
        "https://alembic.sqlalchemy.org/en/latest/",
        str(HERE / "_inventories" / "alembic.inv"),
    ),
}
intersphinx_timeout = 1  # never used: every inventory is a local file

# ---------------------------------------------------------------- autodoc

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    # a class made of mixins (InboxStore) shows their methods; the builtins' are not repeated
    "inherited-members": "BaseException,Exception,ValueError,TypeError,ImportError,object,"
    "tuple,dict,str,int,float,bytes,Enum,IntEnum,StrEnum,Protocol,Generic",
}
autodoc_inherit_docstrings = False

# ---------------------------------------------------------------- HTML

html_theme = "furo"
html_title = f"sa-inbox {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
pygments_style = "friendly"
pygments_dark_style = "monokai"

# ---------------------------------------------------------------- linkcheck

# `sphinx-build -b linkcheck` checks the links between pages and to their anchors; links to
# other sites are out of reach of these machines and of CI, so they are not followed.
linkcheck_ignore = [r"https?://.*"]
linkcheck_anchors = True


# ---------------------------------------------------------------- one name per object


def _import_path(path: str) -> object:
    """The object a dotted path names (``sa_inbox.store.store.InboxStore.receive``).

    Attributes win over submodules of the same name (``sa_inbox.retention.purge`` is the
    function the package exports), unless the rest of the path needs the module
    (``sa_inbox.retention.purge.purge_target``).

    :raises LookupError: if a name is neither an attribute nor an importable submodule.
    """
    parts = path.split(".")
    try:
        value: object = importlib.import_module(parts[0])
    except ImportError as exc:
        raise LookupError(path) from exc
    for index, name in enumerate(parts[1:], start=2):
        try:
            value = inspect.getattr_static(value, name)
            continue
        except AttributeError:
            pass
        if inspect.isclass(value) and _sets_attribute(value, name):
            return InstanceAttribute(path)
        for module_name in (".".join(parts[:index]), ".".join(parts[: index - 1])):
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            if module_name == ".".join(parts[:index]):
                value = module
                break
            try:
                value = inspect.getattr_static(module, name)
                break
            except AttributeError:
                continue
        else:
            raise LookupError(path)
    return value


class InstanceAttribute(str):
    """An attribute a class sets on its instances (``self.stats = ...``): it exists, but has
    no object of its own to compare."""


def _sets_attribute(klass: type, name: str) -> bool:
    """Whether a method of ``klass`` (or of a base in sa-inbox) assigns ``self.<name>``."""
    for base in klass.__mro__:
        if not base.__module__.startswith("sa_inbox"):
            continue
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        if name in getattr(base, "__annotations__", {}) or re.search(
            rf"\bself\.{re.escape(name)}\s*(:[^=]*)?=", source
        ):
            return True
    return False


def _identity(value: object) -> object:
    """What two names of one object share (a classmethod's function, a property's getter)."""
    for attribute in ("__func__", "fget"):
        inner = getattr(value, attribute, None)
        if inner is not None:
            return inner
    return value


def _documented(env: BuildEnvironment) -> dict[int, str]:
    """The documented name of each documented object, by the object's id: sa-inbox's own
    entries, then those of the SQLAlchemy and Alembic inventories."""
    cache: dict[int, str] | None = getattr(env, "_sa_inbox_documented", None)
    if cache is not None:
        return cache
    cache = {}
    names = [entry[0] for entry in env.get_domain("py").get_objects()]
    names += [name for _version, entries in INVENTORIES.values() for name, _r, _p in entries]
    for name in names:
        if not name.startswith(LINKED_PACKAGES):
            continue
        try:
            cache.setdefault(id(_identity(_import_path(name))), name)
        except LookupError:
            continue
    env._sa_inbox_documented = cache  # type: ignore[attr-defined]
    return cache


@functools.cache
def _module_imports(module: str) -> dict[str, str]:
    """The names ``module`` imports (``from x import Name``, those for type checking only
    too), each with the full name it stands for."""
    try:
        source = inspect.getsource(importlib.import_module(module))
    except (ImportError, OSError, TypeError):
        return {}
    package = module if module.endswith("__init__") else module.rpartition(".")[0]
    if hasattr(importlib.import_module(module), "__path__"):
        package = module
    names: dict[str, str] = {}
    for statement in ast.walk(ast.parse(source)):
        if not isinstance(statement, ast.ImportFrom):
            continue
        origin = statement.module or ""
        if statement.level:
            base = package.split(".")
            base = base[: len(base) - statement.level + 1]
            origin = ".".join([*base, origin] if origin else base)
        for alias in statement.names:
            names[alias.asname or alias.name] = f"{origin}.{alias.name}"
    return names


def _context_modules(node: pending_xref) -> list[tuple[str, str | None]]:
    """The modules (and class) a short reference is read in: the documented module, the
    modules and classes that hold the object whose docstring holds the reference
    (``…:docstring of sa_inbox.retention.purge.purge``)."""
    contexts: list[tuple[str, str | None]] = []
    module, klass = node.get("py:module"), node.get("py:class")
    if module:
        contexts.append((module, klass))
    owner = re.search(r"docstring of ([\w.]+)", node.source or "")
    if owner:
        parts = owner.group(1).split(".")
        for cut in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:cut])
            try:
                value = _import_path(prefix)
            except LookupError:
                continue
            if inspect.ismodule(value) or prefix in sys.modules:
                contexts.append((prefix, None))
            elif inspect.isclass(value):
                contexts.append((prefix.rpartition(".")[0], value.__name__))
    return contexts


@functools.cache
def _imported_anywhere() -> dict[str, str]:
    """Each name that sa-inbox's modules import from one place only, with that place:
    what a type hint written with a name imported for type checking only stands for."""
    import sa_inbox

    seen: dict[str, set[str]] = {}
    for module in pkgutil.walk_packages(sa_inbox.__path__, "sa_inbox."):
        for name, full in _module_imports(module.name).items():
            seen.setdefault(name, set()).add(full)
    unique: dict[str, str] = {}
    for name, fulls in seen.items():
        objects = set()
        for full in fulls:
            try:
                objects.add(id(_import_path(full)))
            except LookupError:
                objects.add(id(full))
        if len(objects) == 1:
            unique[name] = min(fulls)
    return unique


def _candidates(node: pending_xref) -> list[str]:
    """The full names a reference may mean: as written, then in its class and module, then
    through the modules' imports."""
    target: str = node["reftarget"].lstrip(".~")
    candidates = [target]
    head, _, rest = target.partition(".")
    if not target.startswith(LINKED_PACKAGES):
        for module, klass in _context_modules(node):
            if klass:
                candidates.append(f"{module}.{klass}.{target}")
            candidates.append(f"{module}.{target}")
            imported = _module_imports(module).get(head)
            if imported:
                candidates.append(f"{imported}.{rest}" if rest else imported)
        imported = _imported_anywhere().get(head)
        if imported:
            candidates.append(f"{imported}.{rest}" if rest else imported)
    return candidates


def resolve_other_name(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement
) -> nodes.Element | None:
    """Resolve a reference to an object under another of its names.

    An object is documented once, under its public name (``sa_inbox.store.InboxStore``,
    ``sqlalchemy.orm.Session``); docstrings and type hints name it where it is defined
    (``sa_inbox.store.store.InboxStore``, ``sqlalchemy.orm.session.Session``) or where it
    is re-exported (``sa_inbox.InboxStore``). Both resolve here to the documented entry,
    found by the object's identity. A reference to an object of sa-inbox that exists but is
    not public (an internal module, a type variable) renders as code, unlinked; a name that
    does not exist stays a broken reference, which fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    documented = _documented(env)
    for candidate in _candidates(node):
        if candidate.startswith(UNLINKED_LIBRARIES):
            return contnode
        if not candidate.startswith(LINKED_PACKAGES):
            continue
        try:
            value = _import_path(candidate)
        except LookupError:
            continue
        if isinstance(value, InstanceAttribute):
            found = _resolve_instance_attribute(app, env, node, contnode, candidate)
            if found is not None:
                return found
            if candidate.startswith("sa_inbox"):
                return contnode  # an undocumented attribute: unlinked
            continue
        name = documented.get(id(_identity(value)))
        if name is None:
            if candidate.startswith("sa_inbox"):
                return contnode  # internal: unlinked
            continue
        if name == node["reftarget"]:
            continue
        found = _resolve_as(app, env, node, contnode, name)
        if found is not None:
            return found
    return _resolve_public_module(app, env, node, contnode)


def _resolve_as(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement, name: str
) -> nodes.Element | None:
    """``node`` resolved as the documented ``name`` (ours, or an inventory's)."""
    renamed = node.deepcopy()
    renamed["reftarget"] = name
    renamed["refspecific"] = False
    if not name.startswith("sa_inbox"):
        return intersphinx.missing_reference(app, env, renamed, contnode)
    domain = env.get_domain("py")
    for role in (node["reftype"], "obj"):  # a class named with :func: etc.: any role
        found = domain.resolve_xref(env, node["refdoc"], app.builder, role, name, renamed, contnode)
        if found is not None:
            return found
    return None


def _resolve_instance_attribute(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement, path: str
) -> nodes.Element | None:
    """An attribute set on instances, under its class's documented name."""
    owner, _, attribute = path.rpartition(".")
    try:
        klass = _import_path(owner)
    except LookupError:
        return None
    name = _documented(env).get(id(klass))
    return None if name is None else _resolve_as(app, env, node, contnode, f"{name}.{attribute}")


def _resolve_public_module(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement
) -> nodes.Element | None:
    """A standard-library name under its private module (``asyncio.locks.Event``), as the
    Python documentation names it (``asyncio.Event``)."""
    target: str = node["reftarget"]
    parts = target.split(".")
    if len(parts) < 3 or target.startswith(LINKED_PACKAGES):
        return None
    renamed = node.deepcopy()
    renamed["reftarget"] = f"{parts[0]}.{parts[-1]}"
    return intersphinx.missing_reference(app, env, renamed, contnode)


def skip_foreign_member(
    app: Sphinx, what: str, name: str, obj: object, skip: bool, options: Any
) -> bool | None:
    """Leave out what a class inherits from another library (a ``TypeDecorator``'s methods,
    Alembic's ``Config``): that library documents it."""
    if what not in ("class", "exception"):
        return None
    inner = _identity(obj)
    owner = getattr(inner, "__objclass__", None)
    module = getattr(owner if owner is not None else inner, "__module__", None)
    if isinstance(module, str) and not module.startswith("sa_inbox"):
        return True
    return None


def readable_defaults(
    app: Sphinx,
    what: str,
    name: str,
    obj: object,
    options: Any,
    signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None] | None:
    """Write a dataclass's generated defaults as Python: ``<function f at 0x…>`` as ``f``,
    ``<factory>`` (a ``default_factory``) as ``...``; Sphinx cannot parse the ``repr``."""
    if signature is None or "<" not in signature:
        return None
    signature = re.sub(r"<function ([\w.]+) at 0x[0-9a-f]+>", r"\1", signature)
    return signature.replace("<factory>", "..."), return_annotation


def terminal_help_as_rest(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    """The commands' help is written for a terminal: a word in single backquotes is code
    there (not a reference, as reST's default role would make it), and ``*`` and a word's
    trailing ``_`` are plain characters (``chaos_*`` tables), not markup."""
    for index, line in enumerate(lines):
        line = re.sub(r"(?<![`:])`([^`]+)`(?!`)", r"``\1``", line)
        parts = re.split(r"(``[^`]+``)", line)
        for at in range(0, len(parts), 2):  # outside the literals
            text = re.sub(r"(?<![*\\])\*(?!\*)", r"\\*", parts[at])
            parts[at] = re.sub(r"(\w)_(?=\W|$)", r"\1\\_", text)
        lines[index] = "".join(parts)


def setup(app: Sphinx) -> dict[str, Any]:
    for event in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{event}", terminal_help_as_rest)
    app.connect("autodoc-process-signature", readable_defaults)
    app.connect("missing-reference", resolve_other_name)
    app.connect("autodoc-skip-member", skip_foreign_member)
    return {"parallel_read_safe": True}
