"""The built-in policies, one module each; importing this package registers them all.

Each module's docstring states its rule and where the rule comes from.
A new built-in policy is a new module here with a class decorated by
`schedulearn.core.registry.register`; nothing else needs to change.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
