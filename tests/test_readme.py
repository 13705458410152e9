"""The README stays true: the settings it shows are every setting, with the defaults the code has."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

from neverest.config import Config

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_shows_the_example_config_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", readme, flags=re.S)
    example = (ROOT / "docs" / "config.example.toml").read_text(encoding="utf-8")
    assert example in blocks
    shown = tomllib.loads(example)
    assert set(shown) == {f.name for f in fields(Config)}
    defaults = Config()
    for name, value in shown.items():
        expected = getattr(defaults, name)
        assert (list(expected) if isinstance(expected, tuple) else expected) == value, name
