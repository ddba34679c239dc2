"""The one validation layer for user-facing parameters (env kwargs, reset options, configs, files).

Each ``check_*`` function checks one value, returns it normalised (e.g. ``"12"`` → ``12``) and
otherwise raises :class:`~arlgym.errors.ConfigError` with one message of this format::

    [<where>: ]<name>=<value!r> is invalid: expected <what is accepted>. Fix: <how to fix it>.

for example ``arl/Sokoban-v0: search_depth='x' is invalid: expected an int >= 1. Fix: pass an
int, e.g. search_depth=1.`` The value's ``repr`` is cut to 80 characters. ``where`` (optional)
names the owner: an env id, ``"trainer config"``, a file path.

Conversions, decided once here so every caller behaves alike:

* **ints**: ``int`` and NumPy integers; a ``str`` holding a base-10 integer literal (``"12"``,
  ``" -3 "``, ``"1_000"``) is converted, because CLIs, env vars and YAML hand over strings.
  ``bool`` is *not* an int, and floats are rejected (even ``3.0``) rather than silently
  truncated.
* **floats**: ``int``/``float``/NumPy numbers and numeric strings (``"1e-6"``: PyYAML reads
  ``lr: 1e-6`` as a string); ``bool``, NaN and ±inf are rejected unless ``finite=False``.
* **bools**: ``True``/``False`` (and NumPy bools) only. The strings ``"false"``/``"no"``/``"0"``
  are errors, never truthy.
* **None**: rejected unless the call passes ``allow_none=True`` (then returned as is).

>>> check_int("max_steps", "15", min=1)
15
>>> check_choice("split", "train", ["train", "test"])
'train'
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from arlgym.core.env_ids import register_envs
from arlgym.errors import ArlgymError, ConfigError

__all__ = [
    "bad_value",
    "check_bool",
    "accepted_kwargs",
    "check_env_kwargs",
    "make_checked_env",
    "raise_unknown_kwargs",
    "check_choice",
    "check_float",
    "check_int",
    "check_keys",
    "check_mapping",
    "check_pair_of_ints",
    "check_path",
    "check_sequence",
    "check_str",
    "did_you_mean",
    "format_value",
]

T = TypeVar("T")

_MAX_REPR = 80
_INT_LITERAL = re.compile(r"^[+-]?\d+(_\d+)*$")


def format_value(value: Any) -> str:
    """``repr(value)``, cut to 80 characters (a long list must not flood the message)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def bad_value(name: str, value: Any, expected: str, fix: str | None = None, *,
              where: str | None = None) -> ConfigError:
    """Build (not raise) the ConfigError of the module's message format.

    Args:
        name: the parameter's name as the user spells it (``"search_depth"``,
            ``"options['task_id']"``, ``"env_kwargs.dim_room"``).
        value: the bad value (its repr goes into the message).
        expected: what is accepted, e.g. ``"an int >= 1"``.
        fix: how to fix it; default ``"pass <expected>"``.
        where: optional owner prefix (env id, config file, ...).
    """
    prefix = f"{where}: " if where else ""
    fix = fix or f"pass {expected}"
    return ConfigError(f"{prefix}{name}={format_value(value)} is invalid: expected {expected}. "
                       f"Fix: {fix.rstrip('.')}.")


def did_you_mean(value: Any, choices: Iterable[Any]) -> str:
    """``" (did you mean 'x'?)"`` for the closest string choice, else ``""``."""
    if not isinstance(value, str):
        return ""
    names = [str(c) for c in choices]
    close = difflib.get_close_matches(value, names, n=1, cutoff=0.75)
    if not close:
        close = [c for c in names if c.lower() == value.strip().lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _range_text(min: Any, max: Any, gt: Any = None, lt: Any = None) -> str:
    parts = []
    if gt is not None:
        parts.append(f"> {gt}")
    elif min is not None:
        parts.append(f">= {min}")
    if lt is not None:
        parts.append(f"< {lt}")
    elif max is not None:
        parts.append(f"<= {max}")
    return " and ".join(parts)


def check_int(name: str, value: Any, *, min: int | None = None, max: int | None = None,
              fix: str | None = None, allow_none: bool = False, where: str | None = None,
              example: Any = None) -> Any:
    """Check an int in ``[min, max]`` (inclusive); a str holding an int literal is converted.
    ``example`` (e.g. the default) is shown in the fix hint.

    Returns:
        The value as a Python ``int`` (or ``None`` when ``allow_none`` and it is ``None``).

    Raises:
        ConfigError: not an int (bool and float included) or out of range.
    """
    if value is None and allow_none:
        return None
    rng = _range_text(min, max)
    expected = "an int" + (f" {rng}" if rng else "") + (" or None" if allow_none else "")
    if example is None:
        example = min if min is not None else (max if max is not None and max < 1 else 1)
    fix = fix or f"pass an int{(' ' + rng) if rng else ''}, e.g. {name}={example}"
    if isinstance(value, bool):
        raise bad_value(name, value, expected, fix, where=where)
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, str) and _INT_LITERAL.match(value.strip()):
        out = int(value.strip())
    else:
        raise bad_value(name, value, expected, fix, where=where)
    if (min is not None and out < min) or (max is not None and out > max):
        raise bad_value(name, value, expected, fix, where=where)
    return out


def check_float(name: str, value: Any, *, min: float | None = None, max: float | None = None,
                gt: float | None = None, lt: float | None = None, finite: bool = True,
                fix: str | None = None, allow_none: bool = False,
                where: str | None = None, example: Any = None) -> Any:
    """Check a real number; ``min``/``max`` are inclusive, ``gt``/``lt`` exclusive bounds.

    Ints, floats, NumPy numbers and numeric strings (``"1e-6"``) are accepted; the result is a
    Python ``float``. ``bool`` is rejected, and so are NaN and ±inf unless ``finite=False``.
    """
    if value is None and allow_none:
        return None
    rng = _range_text(min, max, gt, lt)
    expected = ("a finite number" if finite else "a number") + (f" {rng}" if rng else "") + (
        " or None" if allow_none else "")
    if fix is None:
        if example is None:
            example = min if min is not None else (gt * 2 if gt else (gt + 1 if gt is not None else 0.1))
        fix = f"pass a number{(' ' + rng) if rng else ''}, e.g. {name}={example}"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise bad_value(name, value, expected, fix, where=where)
    try:
        out = float(value.strip().replace("_", "") if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        raise bad_value(name, value, expected, fix, where=where) from None
    if finite and not math.isfinite(out):
        raise bad_value(name, value, expected, fix, where=where)
    if math.isnan(out):
        raise bad_value(name, value, expected, fix, where=where)
    if ((min is not None and out < min) or (max is not None and out > max)
            or (gt is not None and out <= gt) or (lt is not None and out >= lt)):
        raise bad_value(name, value, expected, fix, where=where)
    return out


def check_bool(name: str, value: Any, *, fix: str | None = None, allow_none: bool = False,
               where: str | None = None) -> Any:
    """Check a real bool: ``True`` or ``False`` only. ``"no"``, ``"false"``, ``0`` are errors."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"):
        return bool(value)
    expected = "True or False" + (" or None" if allow_none else "")
    if fix is None:
        if isinstance(value, str) and value.strip().lower() in {"false", "no", "off", "0", "n"}:
            fix = f"pass the bool False, not the string {value!r} (a non-empty string is truthy)"
        elif isinstance(value, str) and value.strip().lower() in {"true", "yes", "on", "1", "y"}:
            fix = f"pass the bool True, not the string {value!r}"
        else:
            fix = f"pass {name}=True or {name}=False"
    raise bad_value(name, value, expected, fix, where=where)


def check_choice(name: str, value: Any, choices: Iterable[Any], *, fix: str | None = None,
                 allow_none: bool = False, where: str | None = None) -> Any:
    """Check that ``value`` is one of ``choices`` (exact match); suggests the closest name."""
    if value is None and allow_none:
        return None
    options = list(choices)
    try:
        ok = value in options
    except TypeError:  # unhashable/uncomparable value
        ok = False
    if ok and (not isinstance(value, bool) or any(isinstance(c, bool) for c in options)):
        return value
    shown = ", ".join(repr(c) for c in options)
    expected = f"one of {shown}" + (" or None" if allow_none else "")
    fix = fix or f"pick one of those{did_you_mean(value, options)}"
    raise bad_value(name, value, expected, fix, where=where)


def check_str(name: str, value: Any, *, nonempty: bool = True, fix: str | None = None,
              allow_none: bool = False, where: str | None = None) -> Any:
    """Check a ``str`` (non-empty after stripping, unless ``nonempty=False``)."""
    if value is None and allow_none:
        return None
    expected = ("a non-empty string" if nonempty else "a string") + (
        " or None" if allow_none else "")
    if not isinstance(value, str) or (nonempty and not value.strip()):
        raise bad_value(name, value, expected, fix, where=where)
    return value


def check_pair_of_ints(name: str, value: Any, *, min: int | None = None, max: int | None = None,
                       allow_single: bool = False, fix: str | None = None,
                       where: str | None = None) -> tuple[int, int]:
    """Check two ints ``(a, b)`` each in ``[min, max]`` (a list or tuple; digit strings convert).

    With ``allow_single=True`` one int ``n`` means ``(n, n)``.
    """
    rng = _range_text(min, max)
    each = f" each {rng}" if rng else ""
    expected = f"two ints (a, b){each}" + (" or one int" if allow_single else "")
    example = min if min is not None else 1
    fix = fix or f"pass e.g. {name}=({example}, {example})"
    if allow_single and not isinstance(value, (list, tuple)):
        try:
            n = check_int(name, value, min=min, max=max, where=where)
        except ConfigError:
            raise bad_value(name, value, expected, fix, where=where) from None
        return (n, n)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise bad_value(name, value, expected, fix, where=where)
    try:
        a, b = (check_int(name, v, min=min, max=max, where=where) for v in value)
    except ConfigError:
        raise bad_value(name, value, expected, fix, where=where) from None
    return (a, b)


def check_path(name: str, value: Any, *, must_exist: bool = True, kind: str | None = None,
               fix: str | None = None, allow_none: bool = False,
               where: str | None = None) -> Any:
    """Check a filesystem path (``str`` or ``os.PathLike``); returns a :class:`~pathlib.Path`.

    Args:
        must_exist: the path must exist.
        kind: ``"file"`` or ``"dir"`` to require that kind (when it exists).
    """
    if value is None and allow_none:
        return None
    what = {"file": "a file path", "dir": "a folder path"}.get(kind or "", "a path")
    if not isinstance(value, (str, Path)) and not hasattr(value, "__fspath__"):
        raise bad_value(name, value, what + (" or None" if allow_none else ""), fix, where=where)
    if isinstance(value, str) and not value.strip():
        raise bad_value(name, value, what, fix, where=where)
    path = Path(value).expanduser()
    if must_exist and not path.exists():
        raise bad_value(name, str(value), f"an existing {what[2:]}",
                        fix or f"check the path; {str(path)!r} does not exist", where=where)
    if path.exists() and kind == "file" and not path.is_file():
        raise bad_value(name, str(value), what, fix or f"{str(path)!r} is a folder; give a file",
                        where=where)
    if path.exists() and kind == "dir" and not path.is_dir():
        raise bad_value(name, str(value), what, fix or f"{str(path)!r} is a file; give a folder",
                        where=where)
    return path


def check_mapping(name: str, value: Any, *, fix: str | None = None, allow_none: bool = False,
                  where: str | None = None) -> Any:
    """Check a mapping with string keys (e.g. ``env_kwargs``); returns a ``dict``."""
    if value is None and allow_none:
        return None
    expected = "a mapping of names to values" + (" or None" if allow_none else "")
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise bad_value(name, value, expected,
                        fix or f"write {name} as key: value pairs, e.g. {{'max_steps': 10}}",
                        where=where)
    return dict(value)


def check_keys(name: str, value: Mapping[str, Any], allowed: Iterable[str], *,
               where: str | None = None) -> None:
    """Raise on the first key of ``value`` not in ``allowed``, suggesting the closest one."""
    allowed = sorted(allowed)
    for key in value:
        if key not in allowed:
            raise ConfigError(
                f"{(where + ': ') if where else ''}{name} has an unknown key {format_value(key)}"
                f"{did_you_mean(key, allowed)}. Fix: use only {', '.join(map(repr, allowed))}.")


def check_sequence(name: str, value: Any, item: Callable[[str, Any], T] | None = None, *,
                   min_len: int = 0, fix: str | None = None, allow_none: bool = False,
                   where: str | None = None) -> Any:
    """Check a list/tuple (not a str) of at least ``min_len`` items; ``item(name[i], v)`` checks
    and converts each one. Returns a ``list``."""
    if value is None and allow_none:
        return None
    expected = "a list" + (f" of at least {min_len} item(s)" if min_len else "") + (
        " or None" if allow_none else "")
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) < min_len:
        raise bad_value(name, value, expected, fix, where=where)
    if item is None:
        return list(value)
    return [item(f"{name}[{i}]", v) for i, v in enumerate(value)]


def accepted_kwargs(cls: type) -> list[str]:
    """The keyword names the ``__init__`` methods along ``cls``'s MRO accept."""
    import inspect

    names: list[str] = []
    for klass in getattr(cls, "__mro__", [cls]):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            params = inspect.signature(init).parameters.items()
        except (TypeError, ValueError):  # pragma: no cover - builtins
            continue
        names += [p for p, par in params if p != "self" and p not in names
                  and par.kind not in (par.VAR_KEYWORD, par.VAR_POSITIONAL)]
    return names


def raise_unknown_kwargs(cls: type, unknown: Mapping[str, Any], *, where: str | None = None):
    """Raise ConfigError for the first of ``unknown`` keywords, listing what ``cls`` accepts."""
    accepted = accepted_kwargs(cls)
    key = next(iter(unknown))
    prefix = f"{where}: " if where else ""
    raise ConfigError(f"{prefix}unknown keyword argument {key!r}{did_you_mean(key, accepted)}. "
                      f"Fix: use only {', '.join(sorted(accepted))}")


def check_env_kwargs(env_id: str, kwargs: Mapping[str, Any] | None, *, name: str = "env_kwargs",
                     where: str | None = None) -> None:
    """Build one ``env_id`` env with ``kwargs`` and close it, so bad env kwargs fail up front
    (e.g. before a trainer loads its model) as a :class:`ConfigError` naming the key; see
    :func:`make_checked_env`."""
    make_checked_env(env_id, kwargs, name=name, where=where).close()


def make_checked_env(env_id: str, kwargs: Mapping[str, Any] | None, *,
                     name: str = "env_kwargs", where: str | None = None) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` with user errors turned into :class:`ConfigError`:
    an unknown id (with a "did you mean"), an unknown keyword (listing the accepted ones).

    arlgym errors raised by the env's own checks pass through unchanged; a ``TypeError`` for an
    unknown keyword becomes a ConfigError listing the accepted ones; any other ``ValueError`` /
    ``TypeError`` is wrapped with the env id and ``kwargs`` named.
    """
    import gymnasium as gym

    register_envs()
    kwargs = check_mapping(name, kwargs, allow_none=True, where=where) or {}
    prefix = f"{where}: " if where else ""
    if not isinstance(env_id, str) or env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("arl/"))
        raise ConfigError(f"{prefix}unknown env id {env_id!r}{did_you_mean(env_id, known)}. Fix: "
                          f"use a registered id: {', '.join(known)}")
    try:
        env = gym.make(env_id, **kwargs)
    except ArlgymError:
        raise
    except TypeError as e:
        entry = gym.registry[env_id].entry_point
        try:
            cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
            accepted = accepted_kwargs(cls)
        except ImportError:  # pragma: no cover - best effort listing
            accepted = []
        bad = [k for k in kwargs if accepted and k not in accepted and k not in
               ("max_episode_steps", "disable_env_checker", "render_mode")]
        if bad:
            raise ConfigError(f"{prefix}{name} has an unknown key {bad[0]!r} for {env_id}"
                              f"{did_you_mean(bad[0], accepted)}. Fix: use only "
                              f"{', '.join(sorted(accepted))}") from e
        raise ConfigError(f"{prefix}{env_id} rejected {name}={format_value(kwargs)}: {e}. Fix: "
                          "check the types of the values") from e
    except ValueError as e:
        raise ConfigError(f"{prefix}{env_id} rejected {name}={format_value(kwargs)}: {e}. Fix: "
                          "check the values") from e
    return env
