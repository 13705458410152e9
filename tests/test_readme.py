"""The README stays true: its test command is what CI runs, and the settings it points to are every setting, with
the defaults the code has."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from neverest.config import Config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "docs/config.example.toml"


def test_the_example_config_holds_every_setting_with_the_code_defaults() -> None:
    shown = tomllib.loads((ROOT / EXAMPLE).read_text(encoding="utf-8"))
    assert set(shown) == set(Config._fields)
    defaults = Config()
    for name, value in shown.items():
        expected = getattr(defaults, name)
        assert (list(expected) if isinstance(expected, tuple) else expected) == value, name


def test_the_readme_and_the_reference_point_to_the_example_config() -> None:
    assert f"]({EXAMPLE})" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](config.example.toml)" in (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.startswith("python3 -m venv")]
    assert len(ci) == 1
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    assert any(block.strip() == ci[0] for block in blocks), "the README's test command is not .ci/run's"
