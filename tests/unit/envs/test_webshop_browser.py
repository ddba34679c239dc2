"""The WebShop site over HTTP (Flask on loopback) and through headless Chromium: the browser env
reads exactly the text env's pages off the DOM, and every purchase is scored by the site."""

import gymnasium as gym
import numpy as np
import pytest

import arlgym  # noqa: F401
from arlgym.envs.webshop.engine import ShopSession
from arlgym.envs.webshop.env import REWARD_WIN, load_shop
from arlgym.envs.webshop.server import ShopServer


@pytest.fixture(scope="module")
def server():
    srv = ShopServer().start()
    yield srv
    srv.shutdown()


def _session(goal_index=0):
    catalog, index = load_shop(None, 1000, 0)
    return ShopSession(catalog, index, catalog.goals[goal_index])


def test_pages_carry_the_text_and_clickables_of_the_engine(server):
    client = server.app.test_client()
    session = _session()
    sid = server.register(session)
    page = client.get(f"/s/{sid}").get_data(as_text=True)
    assert 'name="q"' in page and session.goal.instruction in page
    assert client.get(f"/s/{sid}/search?q=green+tea").status_code == 302
    assert session.page == "results" and session.query == "green tea"
    page = client.get(f"/s/{sid}").get_data(as_text=True)
    for clickable in session.clickables():
        assert f'data-click="{clickable.replace(">", "&gt;").replace("<", "&lt;")}"' in page
    client.get(f"/s/{sid}/act?a=click[next >]")
    assert session.page_no == 2 and "data-step='2'" in client.get(f"/s/{sid}").get_data(as_text=True)
    assert client.get("/s/nosuchsession").status_code == 404
    assert client.get("/").status_code == 404  # no goal factory: not a public shop


def test_serve_mode_gives_each_visitor_a_new_goal(server):
    server.new_session_factory = lambda: _session(3)
    try:
        response = server.app.test_client().get("/")
        assert response.status_code == 302 and response.headers["Location"].startswith("/s/")
    finally:
        server.new_session_factory = None


def test_browser_env_sees_what_the_text_env_sees_and_buys_through_the_site(chromium):
    browser = gym.make("arl/WebShopBrowser-v0", render_mode="rgb_array").unwrapped
    text = gym.make("arl/WebShop-v0").unwrapped
    try:
        for task_id in ("goal-0", "goal-9"):
            pb, ib = browser.reset(options={"task_id": task_id})
            pt, it = text.reset(options={"task_id": task_id})
            assert pb == pt and ib == it
            for _ in range(10):
                response = text.expert_response()
                ob, rb, termb, truncb, ib = browser.step(response)
                ot, rt, termt, trunct, it = text.step(response)
                assert (ob, rb, termb, truncb, ib) == (ot, rt, termt, trunct, it)
                if termt:
                    break
            assert ib["won"] and rb == REWARD_WIN
        # an action that is no element of the page is not sent to the site
        browser.reset(options={"task_id": "goal-1"})
        _, _, _, _, info = browser.step("<think>x</think><action>click[buy now]</action>")
        assert not info["action_valid"] and info["raw_observation"] == "Search"
        image = browser.render()
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3 and image.std() > 0
    finally:
        browser.close()
    assert browser.driver is None
