"""The pytest plugin of sa-inbox under its documented name, for ``-p
sa_inbox.testing.plugin`` and ``pytest_plugins = ["sa_inbox.testing.plugin"]``: the
``exactly_once`` fixture of :mod:`_sa_inbox_pytestplugin`, the module the ``pytest11``
entry point loads (it imports neither sa-inbox nor SQLAlchemy, so loading it costs a
project that does not use it nothing).
"""

from __future__ import annotations

from .._optional import optional_dependencies

with optional_dependencies(__name__, "testing", "pytest"):
    from _sa_inbox_pytestplugin import exactly_once

__all__ = ["exactly_once"]
