"""A PNG of an arena report's index.html (headless Chromium), for docs and READMEs.

    python experiments/screenshot_report.py runs/arena_cpu/grid/report/index.html docs/figures/arena_cpu/report.png
"""

from __future__ import annotations

import sys
from pathlib import Path


def screenshot(index: Path, png: Path, width: int = 1400, height: int = 2200) -> Path:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from arlgym.envs.webshop.browser import find_chrome

    browser, driver_path = find_chrome()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}", "--allow-file-access-from-files"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.get(index.resolve().as_uri())
        png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(png))
    finally:
        driver.quit()
    return png


if __name__ == "__main__":
    print(screenshot(Path(sys.argv[1]), Path(sys.argv[2])))
