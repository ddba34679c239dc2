"""Where Chromium and ChromeDriver are on this machine.

A leaf module: :mod:`arlgym.envs.requirements` asks it whether ``arl/WebShopBrowser-v0`` can run
here without importing the env, and the env asks it for the paths it starts.
"""

from __future__ import annotations

import os
import shutil

from arlgym.errors import ConfigError

__all__ = ["find_chrome"]


def find_chrome() -> tuple[str, str]:
    """Paths of (chromium, chromedriver), or a :class:`ConfigError` that says how to install."""
    browser = os.environ.get("CHROMIUM") or next(
        (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        raise ConfigError("WebShopBrowser needs Chromium and ChromeDriver: apt-get install chromium "
                          "chromium-driver (or set CHROMIUM / CHROMEDRIVER to their paths)")
    return browser, driver
