"""Aeon's one exception tree: every error Aeon raises on purpose is an `AeonError`.

Callers catch `AeonError` (or one of its branches) instead of enumerating the modules that
raise; the branches say what kind of trouble it is, each class where its module raises it.
"""

from __future__ import annotations


class AeonError(Exception):
    """Base of every error Aeon raises on purpose."""
