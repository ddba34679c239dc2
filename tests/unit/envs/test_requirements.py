"""What each env needs: `arlgym envs` says which envs are usable here and the exact install
command of each that is not; a missing piece is an error at `gymnasium.make` (never at the first
reset), and TIR Math never changes its reward with what is installed. Missing packages are
simulated the way Python itself sees one: a ``None`` entry in ``sys.modules``."""

from __future__ import annotations

import logging
import sys

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.cli import main
from arlgym.errors import MissingDependency


def _without(monkeypatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_envs_lists_usable_envs_and_install_commands(monkeypatch, capsys):
    _without(monkeypatch, "Stemmer", "math_verify")
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("arl/WebShop-v0 "))
    assert "NOT usable" in lines[row] and "PyStemmer" in lines[row]
    assert lines[row + 1].split("install: ")[1] == (
        f"{sys.executable} -m pip install -e '{arlgym.__file__.rsplit('/arlgym/', 1)[0]}[webshop]'")
    tir = next(line for line in lines if line.startswith("arl/TIRMath-v0 "))
    assert "NOT usable" in tir and "math-verify" in tir
    assert next(line for line in lines if line.startswith("arl/Sokoban-v0 ")).split()[1] == "usable"
    assert "cannot be made here" in out


def test_all_usable_envs_say_so(capsys):
    main(["envs"])
    out = capsys.readouterr().out
    for env_id in ("arl/Sokoban-v0", "arl/SokobanVision-v0", "arl/ALFWorld-v0", "arl/TIRMath-v0",
                   "arl/WebShop-v0"):  # what this test machine has installed
        assert next(line for line in out.splitlines() if line.startswith(env_id + " ")).split()[1] == "usable"


@pytest.mark.parametrize("env_id, module, extra", [
    ("arl/WebShop-v0", "Stemmer", "webshop"),
    ("arl/ALFWorld-v0", "alfworld", "alfworld"),
    ("arl/TIRMath-v0", "math_verify", "math"),
])
def test_make_names_the_install_command(monkeypatch, env_id, module, extra):
    _without(monkeypatch, module)
    with pytest.raises(MissingDependency, match=rf"Fix: .* -m pip install .*\[{extra}\]'"):
        gym.make(env_id)


def test_tir_math_without_math_verify_is_an_explicit_logged_choice(monkeypatch, caplog):
    from arlgym.envs.tir_math.answers import answers_match

    _without(monkeypatch, "math_verify")
    with pytest.raises(MissingDependency, match="use_math_verify=False"):
        gym.make("arl/TIRMath-v0")
    with caplog.at_level(logging.INFO, logger="arlgym.envs.tir_math.env"):
        env = gym.make("arl/TIRMath-v0", use_math_verify=False, sandbox="unisolated")
    env.close()
    assert "exact checker only" in caplog.text
    assert answers_match("1/2", "0.5", use_math_verify=False)  # the exact checker alone
    assert not answers_match("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", use_math_verify=False)
    with pytest.raises(MissingDependency, match=r"\[math\]"):  # never a silent fallback
        answers_match("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}")


def test_import_for_raises_the_env_requirement_error(monkeypatch):
    from arlgym.envs.requirements import import_for

    _without(monkeypatch, "alfworld", "alfworld.gen", "alfworld.gen.constants")
    with pytest.raises(MissingDependency, match=r"arl/ALFWorld-v0 needs the alfworld package.*"
                                                r"Fix: .*pip install .*\[alfworld\]"):
        import_for("arl/ALFWorld-v0", "alfworld.gen.constants")


def test_import_for_names_a_module_that_does_not_import_and_returns_the_rest():
    from arlgym.envs.requirements import import_for

    json_module, path_module = import_for("arl/Sokoban-v0", "json", "os.path")
    assert json_module.dumps([1]) == "[1]" and path_module.join("a", "b") == "a/b"
    with pytest.raises(MissingDependency, match=r"arl/Sokoban-v0 needs no_such_module_xyz, which "
                                                r"does not import here .*pip install"):
        import_for("arl/Sokoban-v0", "json", "no_such_module_xyz")
