"""The former names of renamed broker classes, kept for one release with a warning."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["former_names"]


def former_names(
    module: str, renamed: Mapping[str, str], namespace: Mapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that serves each former name of ``renamed``
    (former -> new) as the new object of ``namespace``, with a :class:`DeprecationWarning`.

    :param module: the package's ``__name__``, for the messages.
    :param renamed: former name -> new name.
    :param namespace: the package's ``globals()``.
    :raises AttributeError: from the returned function, for any other name.
    """

    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated and will be removed: use {module}.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return namespace[new]

    return __getattr__
