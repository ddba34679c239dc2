"""What each env needs beyond arlgym's core install, whether this machine has it, and the exact
command that installs what is missing.

``arlgym envs`` prints it; the envs call :func:`require` when they are made, so a missing piece
is one error at ``gymnasium.make`` that names the install command — not a failure at the first
``reset`` or, worse, an env that quietly behaves differently with what happens to be installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from arlgym.envs.tir_math.isolation import find_bwrap, isolation_problem
from arlgym.envs.webshop.chrome import find_chrome
from arlgym.errors import ConfigError, MissingDependency

__all__ = ["Requirement", "ENV_REQUIREMENTS", "missing", "require", "pip_install", "import_for"]


def pip_install(extra: str) -> str:
    """The command that installs arlgym's ``extra`` into this very interpreter: from the
    checkout when arlgym runs from one (an editable install), else from the package index."""
    python = shlex.quote(sys.executable)
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        return f"{python} -m pip install -e {shlex.quote(f'{root}[{extra}]')}"
    return f"{python} -m pip install {shlex.quote(f'arlgym[{extra}]')}"


def _module(name: str) -> Callable[[], bool]:
    def present() -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a None entry
            return False

    return present


def _sandbox_problem() -> str | None:
    """Why the TIR sandbox cannot isolate cells for this interpreter — the very check
    ``gymnasium.make("arl/TIRMath-v0")`` runs (``isolation_problem``: bubblewrap, the kernel's
    namespaces, an interpreter whose own directory is all of /tmp) — or ``None``."""
    return isolation_problem(sys.executable)


def _sandbox() -> bool:
    return _sandbox_problem() is None


def _sandbox_fix() -> str | None:
    """What a missing sandbox needs when installing bubblewrap is not the fix."""
    return None if find_bwrap() is None else _sandbox_problem()


def _chromium() -> bool:
    try:
        find_chrome()
    except ConfigError:
        return False
    return True


@dataclass(frozen=True)
class Requirement:
    """One thing an env needs: what it is, how to tell it is here, how to install it."""

    what: str
    present: Callable[[], bool]
    install_extra: str | None = None
    install_command: str | None = None
    #: when absent: what is wrong where installing is not the fix (its text names the fix)
    problem: Callable[[], str | None] | None = None

    def why(self) -> str | None:
        """What is wrong beyond "not installed", if anything (call only when absent)."""
        return self.problem() if self.problem else None

    @property
    def install(self) -> str:
        return self.install_command or pip_install(self.install_extra or "all")


_ALFWORLD = (Requirement("the alfworld package", _module("alfworld"), "alfworld"),
             Requirement("the textworld package", _module("textworld"), "alfworld"))
_WEBSHOP = (Requirement("PyStemmer", _module("Stemmer"), "webshop"),)
_BROWSER = (*_WEBSHOP,
            Requirement("uvicorn", _module("uvicorn"), "webshop"),
            Requirement("selenium", _module("selenium"), "browser"),
            Requirement("Chromium and ChromeDriver", _chromium,
                        install_command="apt-get install chromium chromium-driver"))
_MATH_VERIFY = Requirement("math-verify (the answer checker)", _module("math_verify"), "math")
_BWRAP = Requirement("bubblewrap (the code sandbox)", _sandbox, "sandbox", problem=_sandbox_fix)

#: env id -> what it needs with its default kwargs
ENV_REQUIREMENTS: dict[str, tuple[Requirement, ...]] = {
    "arl/Sokoban-v0": (),
    "arl/SokobanVision-v0": (),
    "arl/ALFWorld-v0": _ALFWORLD,
    "arl/TIRMath-v0": (_MATH_VERIFY, _BWRAP),
    "arl/WebShop-v0": _WEBSHOP,
    "arl/WebShopBrowser-v0": _BROWSER,
}


def missing(env_id: str, skip: tuple[str, ...] = ()) -> list[Requirement]:
    """The requirements of ``env_id`` that this machine lacks (``skip``: ones a kwarg waived)."""
    return [r for r in ENV_REQUIREMENTS.get(env_id, ()) if r.what not in skip and not r.present()]


def install_commands(reqs: list[Requirement]) -> list[str]:
    """The distinct install commands of ``reqs``, one per extra, in order (none for one whose
    :meth:`Requirement.why` says installing is not the fix)."""
    out: list[str] = []
    for r in reqs:
        if r.why() is None and r.install not in out:
            out.append(r.install)
    return out


def require(env_id: str, skip: tuple[str, ...] = (), hint: str = "") -> None:
    """Raise :class:`MissingDependency` naming what ``env_id`` lacks here and how to install it."""
    lacking = missing(env_id, skip)
    if lacking:
        whys = [w for r in lacking if (w := r.why())]
        commands = install_commands(lacking)
        raise MissingDependency(
            f"{env_id} needs {', '.join(r.what for r in lacking)}, not usable here"
            + "".join(f": {w}" for w in whys)
            + (". Fix: " + " && ".join(commands) if commands else "")
            + (f" ({hint})" if hint else ""))


def import_for(env_id: str, *modules: str) -> list[ModuleType]:
    """Import ``modules`` (dotted names), which ``env_id`` needs, and return them in order.

    A module that does not import raises the error :func:`require` raises for ``env_id`` —
    what the env lacks and the command that installs it — or, when every listed requirement
    is present but the import still fails (a broken or partial install), a
    :class:`MissingDependency` that names the module and the same install command.
    """
    try:
        return [importlib.import_module(name) for name in modules]
    except ImportError as e:
        require(env_id)
        commands = install_commands(list(ENV_REQUIREMENTS.get(env_id, ()))) or [pip_install("all")]
        raise MissingDependency(f"{env_id} needs {e.name or 'a module'}, which does not import "
                                f"here ({e}). Fix: reinstall: {' && '.join(commands)}") from e
