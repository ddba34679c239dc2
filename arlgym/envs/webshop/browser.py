"""``arl/WebShopBrowser-v0``: WebShop played through a real headless Chromium.

The site is served by the process's loopback waitress server
(:mod:`~arlgym.envs.webshop.server`); each env drives its own Chromium through Selenium: a
``search[q]`` types ``q`` into the search box and presses the button, a ``click[x]`` clicks the
link whose ``data-click`` is ``x``. The page text, the admissible actions and the outcome are
read back from the browser's DOM (elements marked ``data-text`` / ``data-click``), not from the
engine — so this env exercises the whole HTTP/HTML path, and gives exactly the text env's
observations (tested). ``render()`` returns a screenshot (``uint8`` H×W×3).

Needs the ``[webshop,browser]`` extras and Chromium + ChromeDriver (Debian:
``apt-get install chromium chromium-driver``; ``CHROMEDRIVER`` / ``CHROMIUM`` override the
paths). Nothing is downloaded: Selenium Manager is bypassed by passing the driver's path.
A browser costs ~0.5 s to start and tens of ms per step; the text env is the one to train on.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from typing import Any, ClassVar
from urllib.parse import quote

import numpy as np

from arlgym.core.env import ActResult
from arlgym.envs.webshop.engine import SEP, parse_shop_action
from arlgym.envs.webshop.env import REWARD_WIN, WebShopEnv
from arlgym.envs.webshop.server import shared_server
from arlgym.errors import ArlgymError, ConfigError

__all__ = ["WebShopBrowserEnv", "find_chrome"]

_CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--window-size=1000,900")


def find_chrome() -> tuple[str, str]:
    """Paths of (chromium, chromedriver), or a :class:`ConfigError` that says how to install."""
    browser = os.environ.get("CHROMIUM") or next(
        (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        raise ConfigError("WebShopBrowser needs Chromium and ChromeDriver: apt-get install chromium "
                          "chromium-driver (or set CHROMIUM / CHROMEDRIVER to their paths)")
    return browser, driver


class WebShopBrowserEnv(WebShopEnv):
    """WebShop through headless Chromium; same args as :class:`WebShopEnv` plus ``page_timeout``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    thread_safe: ClassVar[bool] = False  # one browser per env; keep each in its own worker

    def __init__(self, *args: Any, page_timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError as e:
            raise ConfigError("WebShopBrowser needs selenium: pip install 'arlgym[webshop,browser]'") from e
        browser, driver_path = find_chrome()
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        self._profile = tempfile.mkdtemp(prefix="arlgym-chrome-")
        for flag in (*_CHROME_FLAGS, f"--user-data-dir={self._profile}"):
            options.add_argument(flag)
        self.page_timeout = float(page_timeout)
        self.server = shared_server()
        self._sid: str | None = None
        self._page: tuple[list[str], list[str]] | None = None
        try:
            self.driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
        except Exception as e:  # noqa: BLE001 - selenium raises many types; say what to check
            shutil.rmtree(self._profile, ignore_errors=True)
            raise ArlgymError(f"could not start headless Chromium ({browser}, {driver_path}): {e}") from e
        self.driver.set_page_load_timeout(self.page_timeout)

    # ------------------------------------------------------------------ browser I/O
    def _load(self, path: str) -> None:
        self._page = None
        self.driver.get(self.server.url + path)

    def _page_step(self) -> int:
        """The server's action counter of the page now loaded (-1 while none is)."""
        from selenium.common.exceptions import WebDriverException

        try:
            value = self.driver.execute_script(
                "return document.readyState === 'complete' && document.body ? document.body.dataset.step : null")
        except WebDriverException:  # the page is being replaced
            return -1
        return -1 if value is None else int(value)

    def _wait_for_step(self, before: int) -> None:
        """Wait until the page the action led to is loaded (its counter passed ``before``)."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            WebDriverWait(self.driver, self.page_timeout, poll_frequency=0.005).until(
                lambda _: self._page_step() > before)
        except TimeoutException as e:
            raise ArlgymError(f"WebShop page did not load within {self.page_timeout} s") from e

    def _read_page(self) -> tuple[list[str], list[str]]:
        """(visible strings, clickables) of the loaded page: one browser round trip per page
        (cached until the next action is sent)."""
        if self._page is None:
            self._page = self.driver.execute_script(
            "const q = s => Array.from(document.querySelectorAll(s));"
            "return [q('[data-text]').map(e => e.innerText.trim()),"
            "        q('[data-click]:not([data-option])').concat(q('[data-option]'))"
            "          .map(e => e.dataset.click)];")
        return self._page

    def _dom_text(self) -> str:
        return SEP.join(self._read_page()[0])

    def _dom_clickables(self) -> list[str]:
        return list(dict.fromkeys(self._read_page()[1]))

    # ------------------------------------------------------------------ hooks
    def _load_task(self, seed: int | None, options: dict[str, Any]) -> Any:
        spec = super()._load_task(seed, options)
        if self._sid is not None:
            self.server.forget(self._sid)
        assert self.session is not None
        self._sid = self.server.register(self.session, pinned=True)
        self._load(f"/s/{self._sid}")
        spec.observation = self._dom_text()
        return spec

    def _act(self, action: str) -> ActResult:
        assert self.session is not None
        parsed = parse_shop_action(action)
        clickables = self._dom_clickables()
        before = self._page_step()
        if parsed is not None and parsed[0] == "search" and "search" in clickables:
            box = self.driver.find_element("name", "q")
            box.clear()
            box.send_keys(parsed[1])
            self.driver.find_element("css selector", "[data-click='search']").click()
        elif parsed is not None and parsed[0] == "search":
            # WebShop's text env searches from a results or item page too (its pages there have
            # no search box): the browser goes to the search the form would have sent
            self._load(f"/s/{self._sid}/search?q={quote(parsed[1])}")
        elif parsed is not None and parsed[0] == "click" and parsed[1] in clickables and parsed[1] != "search":
            target = parsed[1].replace("\\", "\\\\").replace('"', '\\"')
            self.driver.find_element("css selector", f'[data-click="{target}"]').click()
        else:  # not an element of this page: nothing is sent to the site
            button = parsed == ("click", "search") and "search" in clickables  # empty search box
            return ActResult(self._dom_text(), 0.0, False, button, None)
        self._page = None
        self._wait_for_step(before)
        if self.session.purchased:
            score = self._purchase_score()
            self._last_score = score
            return ActResult(f"You have bought {self.session.purchased}. Score: {score:.2f}",
                             REWARD_WIN if score >= 1.0 else 0.0, True, True, action.strip())
        if parsed[0] == "search":
            self._searches += 1
        return ActResult(self._dom_text(), 0.0, False, True, action.strip())

    def _purchase_score(self) -> float:
        """The score the site shows on the page after the purchase."""
        value = self.driver.execute_script(
            "const e = document.querySelector('[data-score]'); return e ? e.dataset.score : null;")
        if value is None:
            raise ArlgymError("the WebShop page shows no purchase score after buy now")
        return float(value)

    def _noop_result(self, feedback: str) -> ActResult:
        return ActResult(self._dom_text(), 0.0, False, False, None)

    def _admissible(self) -> list[str]:
        assert self.session is not None
        if self.session.purchased:
            return []
        clickables = self._dom_clickables()
        search = ["search[<your query>]"] if "search" in clickables else []
        return search + [f"click[{c}]" for c in clickables]

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            from PIL import Image

            png = self.driver.get_screenshot_as_png()
            return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        return super().render()

    def close(self) -> None:
        driver = getattr(self, "driver", None)
        if driver is not None:
            try:
                driver.quit()
            finally:
                self.driver = None
                shutil.rmtree(self._profile, ignore_errors=True)
        if self._sid is not None:
            self.server.forget(self._sid)
            self._sid = None
        super().close()
