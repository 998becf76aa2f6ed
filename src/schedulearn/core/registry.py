"""Policies by name: the built-in ones and third-party ones from entry points.

A policy spec is a name with optional options: `fifo`,
`fifo:backfill=true`, `tiresias:queues=3:threshold=3600`. Unknown names
and unknown options are refused with the valid choices listed; option
values are read as the types the policy declares (`policy_options`).
Third-party packages add policy classes under the entry-point group
`schedulearn.policies`.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from schedulearn.core.policy import Policy
from schedulearn.core.policy_options import (
    PolicyOptionError,
    UnknownPolicyError,
    convert,
    declared_types,
)

ENTRY_POINT_GROUP = "schedulearn.policies"

__all__ = ["PolicyOptionError", "UnknownPolicyError", "available", "create", "register"]

_P = TypeVar("_P", bound=type[Any])
_registry: dict[str, type[Any]] = {}
_loaded = False
_loading = threading.RLock()  # re-entrant: a policy module may look another up


def register(cls: _P) -> _P:
    """Class decorator: make a policy available under `cls.name`."""
    name = cls.name
    existing = _registry.get(name)
    if existing is not None and existing is not cls:
        raise ValueError(f"two policies are named {name!r}: {existing!r} and {cls!r}")
    _registry[name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    # The server looks policies up from two threads at once (its event loop
    # and its database thread): one must not see the registry half filled.
    with _loading:
        if _loaded:
            return
        importlib.import_module("schedulearn.core.policies")
        # Imported here: importlib.metadata is a tenth of a second the CLI's
        # start-up need not pay until a policy is looked up.
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            cls = ep.load()
            if getattr(cls, "name", None) != ep.name:
                raise ValueError(
                    f"entry point {ep.name!r} in group {ENTRY_POINT_GROUP!r} loads {cls!r}, "
                    f"whose name is {getattr(cls, 'name', None)!r}; make the two agree"
                )
            register(cls)
        _loaded = True


def available() -> list[str]:
    """Every policy name that `create` accepts, sorted."""
    _load()
    return sorted(_registry)


def policy_class(name: str) -> type[Any]:
    _load()
    try:
        return _registry[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(available())}"
        ) from None


def describe(name: str) -> str:
    """The first paragraph of the policy module's docstring."""
    cls = policy_class(name)
    doc = inspect.getdoc(inspect.getmodule(cls)) or inspect.getdoc(cls) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def options_of(name: str) -> dict[str, Any]:
    """The options a policy accepts, with their defaults."""
    params = inspect.signature(policy_class(name)).parameters
    return {
        p.name: p.default
        for p in params.values()
        if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
    }


def create(spec: str, **overrides: Any) -> Policy:
    """Build a policy from a spec such as `tiresias:queues=3`.

    `overrides` are values, not text (a `ProfileTable` for `similarity`).
    A value the policy itself refuses (out of range) is a PolicyOptionError
    with the policy's own message.
    """
    name, options = parse_spec(spec)
    _check_names(name, overrides)
    options.update(overrides)
    factory: Callable[..., Policy] = policy_class(name)
    try:
        return factory(**options)
    except (TypeError, ValueError) as exc:
        said = str(exc)  # the policy's own message, most already name it
        raise PolicyOptionError(said if said.startswith(name) else f"{name}: {said}") from None


def _check_names(name: str, options: dict[str, Any]) -> None:
    accepted = options_of(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        valid = ", ".join(f"{k}={v!r}" for k, v in accepted.items()) or "none"
        raise UnknownPolicyError(
            f"policy {name!r} has no option {', '.join(unknown)}; its options are: {valid}"
        )


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """The policy's name and its options, each as the type the policy declares."""
    name, *pairs = spec.strip().split(":")
    raw: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UnknownPolicyError(
                f"bad option {pair!r} in policy spec {spec!r}; write name:key=value[:key=value]"
            )
        raw[key.strip().replace("-", "_")] = value
    _check_names(name, raw)
    kinds = declared_types(policy_class(name))
    return name, {key: convert(name, key, value, kinds[key]) for key, value in raw.items()}
