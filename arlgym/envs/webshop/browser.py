"""``arl/WebShopBrowser-v0``: WebShop played through a real headless Chromium.

The site is served by the process's loopback uvicorn server
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

A crashed or hung Chromium/ChromeDriver is never a raw Selenium traceback: during ``reset()``
the env kills what is left of the old browser (its whole process group), starts a new one and
carries on; during an episode it raises :class:`BrowserCrashed` (an
:class:`~arlgym.errors.EnvCrashed`, so a :class:`~arlgym.errors.WorkerError`), as the page state
is lost, and the next ``reset()`` starts a new browser. ``browser_restarts`` counts the
replacements. In an async vector with ``restart=True`` (the rollout collector) the crash is
handled like a dead worker: its groups are replayed from reset.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar
from urllib.parse import quote

import numpy as np

from arlgym.core.env import ActResult
from arlgym.core.procfs import process_table
from arlgym.envs.webshop.chrome import find_chrome
from arlgym.envs.webshop.engine import SEP, parse_shop_action
from arlgym.envs.webshop.env import REWARD_WIN, WebShopEnv
from arlgym.envs.webshop.server import shared_server
from arlgym.errors import ArlgymError, ConfigError, EnvCrashed

__all__ = ["WebShopBrowserEnv", "BrowserCrashed", "find_chrome", "process_group"]

logger = logging.getLogger("arlgym.webshop")

#: seconds a liveness probe of a browser that just failed may take before it counts as hung
_PROBE_TIMEOUT = 5.0

_CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--window-size=1000,900")


class BrowserCrashed(EnvCrashed):
    """Chromium or ChromeDriver died or stopped answering during an episode of
    ``arl/WebShopBrowser-v0``; the episode is lost, ``reset()`` starts a new browser."""


def process_group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, read from ``/proc`` (Linux; ``[]``
    elsewhere). Each env's ChromeDriver leads its own group, which holds all its Chromium
    processes, including ones whose parent died."""
    if pgid <= 0:
        return []
    return sorted(pid for pid, fields in process_table().items() if int(fields[2]) == pgid)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL ChromeDriver's whole process group (it is not reaped yet, so the group id
    cannot belong to anyone else), then reap ChromeDriver."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass


def _first_line(e: BaseException) -> str:
    text = str(e).strip().replace("Message: ", "", 1)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


class WebShopBrowserEnv(WebShopEnv):
    """WebShop through headless Chromium; same args as :class:`WebShopEnv` plus ``page_timeout``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    thread_safe: ClassVar[bool] = False  # one browser per env; keep each in its own worker
    spec_id: ClassVar[str] = "arl/WebShopBrowser-v0"  # whose requirements it checks when made

    def __init__(self, *args: Any, page_timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            import selenium  # noqa: F401
        except ImportError as e:
            raise ConfigError("WebShopBrowser needs selenium: pip install 'arlgym[webshop,browser]'") from e
        self._chrome = find_chrome()
        self.page_timeout = float(page_timeout)
        self.server = shared_server()
        self._sid: str | None = None
        self._page: tuple[list[str], list[str]] | None = None
        #: browsers started to replace one that crashed or hung (for logs: a healthy run keeps 0)
        self.browser_restarts = 0
        self._crash: str | None = None  # why the browser died mid-episode (reset() clears it)
        self.driver: Any = None
        self.driver_pid: int | None = None  # ChromeDriver's pid = its process group's id
        self._profile = ""
        self._start_browser()

    # ------------------------------------------------------------------ browser lifecycle
    def _start_browser(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        browser, driver_path = self._chrome
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        self._profile = tempfile.mkdtemp(prefix="arlgym-chrome-")
        for flag in (*_CHROME_FLAGS, f"--user-data-dir={self._profile}"):
            options.add_argument(flag)
        # ChromeDriver leads a new process group, which Chromium and all its helpers join: a
        # crash is cleaned up by killing that group, orphans included
        service = Service(executable_path=driver_path, popen_kw={"start_new_session": True})
        try:
            driver = webdriver.Chrome(service=service, options=options)
        except Exception as e:  # noqa: BLE001 - selenium raises many types; say what to check
            process = getattr(service, "process", None)
            if process is not None:
                kill_group(process)
            shutil.rmtree(self._profile, ignore_errors=True)
            raise ArlgymError(f"could not start headless Chromium ({browser}, {driver_path}): "
                              f"{_first_line(e)}") from e
        self.driver, self.driver_pid = driver, driver.service.process.pid
        self._set_command_timeout(self.page_timeout + 10.0)  # a hung browser cannot block for ever
        driver.set_page_load_timeout(self.page_timeout)

    def _set_command_timeout(self, seconds: float, driver: Any = None) -> None:
        """Seconds Selenium waits for ChromeDriver's answer (its default: for ever)."""
        config = getattr((driver or self.driver).command_executor, "_client_config", None)
        if config is not None:
            config.timeout = seconds

    def _stop_browser(self, graceful: bool) -> None:
        """End the browser: a clean ``quit()`` when it is healthy, then (always) kill whatever
        is left of its process group. Never raises."""
        driver, self.driver, self.driver_pid = getattr(self, "driver", None), None, None
        self._page = None
        if driver is None:
            return
        process = driver.service.process
        if graceful and process.poll() is None:
            try:
                self._set_command_timeout(_PROBE_TIMEOUT, driver)
                driver.quit()  # reaps ChromeDriver; the group may keep a straggler
            except Exception:  # noqa: BLE001 - a browser that fails to quit is killed below
                pass
            for pid in process_group(process.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if process.returncode is None:
            kill_group(process)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _browser_alive(self) -> bool:
        """Whether ChromeDriver runs and the browser answers a trivial script within
        :data:`_PROBE_TIMEOUT` seconds."""
        if self.driver is None or self.driver.service.process.poll() is not None:
            return False
        try:
            self._set_command_timeout(_PROBE_TIMEOUT)
            return self.driver.execute_script("return 1") == 1
        except Exception:  # noqa: BLE001 - any failure here means the browser is gone
            return False
        finally:
            if self.driver is not None:
                self._set_command_timeout(self.page_timeout + 10.0)

    def _death_cause(self, error: BaseException) -> str:
        process = self.driver.service.process if self.driver is not None else None
        if process is not None and process.poll() is not None:
            code = process.returncode
            how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
                   else f"exited with code {code}")
            return f"ChromeDriver (pid {process.pid}) {how}"
        return f"Chromium died or stopped answering ({_first_line(error)})"

    def _env_name(self) -> str:
        spec = getattr(self, "spec", None)
        return spec.id if spec is not None else "arl/WebShopBrowser-v0"

    @contextmanager
    def _browser(self, what: str, task: str | None = None) -> Iterator[Any]:
        """Run browser I/O; a dead or hung browser becomes :class:`BrowserCrashed` (and the env
        remembers it until ``reset()``), any other Selenium failure an :class:`ArlgymError`."""
        from selenium.common.exceptions import TimeoutException

        if self._crash is not None or self.driver is None:
            raise self._crashed(what, self._crash or "the browser was closed", task)
        try:
            yield self.driver
        except ArlgymError:
            raise
        except Exception as e:  # noqa: BLE001 - selenium, urllib3 and socket errors alike
            if self._browser_alive():
                if isinstance(e, TimeoutException):
                    raise ArlgymError(f"{self._env_name()}: the WebShop page did not load within "
                                      f"page_timeout={self.page_timeout:g} s during {what} (the "
                                      "browser still answers). Fix: raise page_timeout on a "
                                      "loaded machine") from e
                raise ArlgymError(f"{self._env_name()}: the browser failed during {what}: "
                                  f"{_first_line(e)}") from e
            self._crash = self._death_cause(e)
            logger.warning("%s: the browser crashed during %s: %s", self._env_name(), what, self._crash)
            self._stop_browser(graceful=False)
            raise self._crashed(what, self._crash, task) from None

    def _crashed(self, what: str, cause: str, task: str | None = None) -> BrowserCrashed:
        if task is None and self._task is not None:
            task = self._task.task_id
        where = f"task {task}, session {self._sid}" if task else "no task yet"
        return BrowserCrashed(
            f"{self._env_name()} ({where}): the browser crashed during {what}: {cause}. The "
            "episode cannot continue (its page state died with the browser). Fix: call reset(); "
            f"it starts a new browser ({self.browser_restarts} replaced so far).",
            env=self._env_name(), task_id=task, cause=cause)

    # ------------------------------------------------------------------ browser I/O
    def _load(self, path: str) -> None:
        self._page = None
        self.driver.get(self.server.url + path)

    def _page_step(self) -> int:
        """The server's action counter of the page now loaded (-1 while none is)."""
        from selenium.common.exceptions import (
            InvalidSessionIdException,
            NoSuchWindowException,
            WebDriverException,
        )

        try:
            value = self.driver.execute_script(
                "return document.readyState === 'complete' && document.body ? document.body.dataset.step : null")
        except (InvalidSessionIdException, NoSuchWindowException):
            raise  # the browser is gone, not a page being replaced
        except WebDriverException:  # the page is being replaced
            return -1
        return -1 if value is None else int(value)

    def _wait_for_step(self, before: int) -> None:
        """Wait until the page the action led to is loaded (its counter passed ``before``);
        Selenium's ``TimeoutException`` after ``page_timeout`` (see :meth:`_browser`)."""
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, self.page_timeout, poll_frequency=0.005).until(
            lambda _: self._page_step() > before)

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
        if self._crash is not None or self.driver is None:  # it died during the last episode
            self._replace_browser()
        for attempt in (1, 2):  # a browser that dies while the page loads is replaced once
            try:
                with self._browser("reset", task=spec.task_id):
                    self._load(f"/s/{self._sid}")
                    spec.observation = self._dom_text()
                return spec
            except BrowserCrashed:
                if attempt == 2:
                    raise
                self._replace_browser()
        raise AssertionError("unreachable")  # pragma: no cover

    def _replace_browser(self) -> None:
        self._stop_browser(graceful=False)
        self._crash = None
        self._start_browser()
        self.browser_restarts += 1
        logger.warning("%s: started a new browser (pid %s; %d replaced so far)", self._env_name(),
                       self.driver_pid, self.browser_restarts)

    def _act(self, action: str) -> ActResult:
        assert self.session is not None
        with self._browser("step") as driver:
            parsed = parse_shop_action(action)
            clickables = self._dom_clickables()
            before = self._page_step()
            if parsed is not None and parsed[0] == "search" and "search" in clickables:
                box = driver.find_element("name", "q")
                box.clear()
                box.send_keys(parsed[1])
                driver.find_element("css selector", "[data-click='search']").click()
            elif parsed is not None and parsed[0] == "search":
                # WebShop's text env searches from a results or item page too (its pages there
                # have no search box): the browser goes to the search the form would have sent
                self._load(f"/s/{self._sid}/search?q={quote(parsed[1])}")
            elif parsed is not None and parsed[0] == "click" and parsed[1] in clickables and parsed[1] != "search":
                target = parsed[1].replace("\\", "\\\\").replace('"', '\\"')
                driver.find_element("css selector", f'[data-click="{target}"]').click()
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
        with self._browser("step"):
            return ActResult(self._dom_text(), 0.0, False, False, None)

    def _admissible(self) -> list[str]:
        assert self.session is not None
        if self.session.purchased:
            return []
        with self._browser("reading the page's actions"):
            clickables = self._dom_clickables()
        search = ["search[<your query>]"] if "search" in clickables else []
        return search + [f"click[{c}]" for c in clickables]

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            from PIL import Image

            with self._browser("render") as driver:
                png = driver.get_screenshot_as_png()
            return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        return super().render()

    def close(self) -> None:
        """Quit the browser (kill it if it crashed or does not quit); never raises."""
        self._stop_browser(graceful=getattr(self, "_crash", None) is None)
        self._crash = None
        if self._sid is not None:
            self.server.forget(self._sid)
            self._sid = None
        super().close()
