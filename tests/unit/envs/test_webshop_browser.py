"""The WebShop site over HTTP (uvicorn on loopback) and through headless Chromium: the browser
env reads exactly the text env's pages off the DOM, every purchase is scored by the site, and
sessions expire so the server's memory stays flat."""

import gymnasium as gym
import numpy as np
import pytest

import arlgym  # noqa: F401
from arlgym.envs.webshop.engine import ShopSession
from arlgym.envs.webshop.env import REWARD_WIN, load_shop
from arlgym.envs.webshop.server import ShopServer
from arlgym.errors import ConfigError


@pytest.fixture(autouse=True, scope="module")
def _own_cache(own_arlgym_cache):
    """Indexes and product stores go to a temporary cache, not the user's ~/.cache."""


@pytest.fixture(scope="module")
def server():
    srv = ShopServer().start()
    yield srv
    srv.shutdown()


def _session(goal_index=0):
    catalog, index = load_shop(None, 1000, 0)
    return ShopSession(catalog, index, catalog.goals[goal_index])


def _get(server, path):
    path, _, query = path.partition("?")
    status, headers, body = server.handle("GET", path, query)
    return int(status.split()[0]), dict(headers), body.decode()


def test_pages_carry_the_text_and_clickables_of_the_engine(server):
    session = _session()
    sid = server.register(session)
    code, _, page = _get(server, f"/s/{sid}")
    assert code == 200 and 'name="q"' in page and session.goal.instruction in page
    code, _, page = _get(server, f"/s/{sid}/search?q=green+tea&n=0")
    assert code == 200 and session.page == "results" and session.query == "green tea"
    assert page == _get(server, f"/s/{sid}")[2]                       # the action answers with the page
    for clickable in session.clickables():
        assert f'data-click="{clickable.replace(">", "&gt;").replace("<", "&lt;")}"' in page
    _get(server, f"/s/{sid}/act?a=click%5Bnext%20%3E%5D&n=1")
    assert session.page_no == 2 and "data-step='2'" in _get(server, f"/s/{sid}")[2]
    _get(server, f"/s/{sid}/act?a=click%5Bnext%20%3E%5D&n=1")          # a reload of an old page
    assert session.page_no == 2 and "data-step='2'" in _get(server, f"/s/{sid}")[2]
    assert _get(server, "/s/nosuchsession")[0] == 404
    assert _get(server, "/")[0] == 404  # no goal factory: not a public shop


def test_served_over_http_by_uvicorn(server):
    import urllib.request

    sid = server.register(_session())
    with urllib.request.urlopen(f"{server.url}/s/{sid}/search?q=wool+socks", timeout=10) as response:
        page = response.read().decode()
        assert response.status == 200 and response.headers["Server"] == "arlgym-webshop"
        assert int(response.headers["Content-Length"]) == len(page.encode())
    assert "Page 1 (Total results: " in page
    head = urllib.request.Request(f"{server.url}/s/{sid}", method="HEAD")
    with urllib.request.urlopen(head, timeout=10) as response:
        assert response.status == 200 and response.read() == b""
    post = urllib.request.Request(f"{server.url}/s/{sid}", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(post, timeout=10)
    assert e.value.code == 405


def test_shutdown_frees_the_port_and_a_taken_port_names_the_fix():
    import socket

    first = ShopServer().start()
    port = first.port
    with pytest.raises(ConfigError, match=f"port={port}: .*127.0.0.1:{port}.*Fix: choose another --port"):
        ShopServer(port=port)
    first.shutdown()
    assert not first._thread.is_alive()
    with socket.create_server(("127.0.0.1", port)):  # the port is free again
        pass
    again = ShopServer(port=port).start()  # and a new site can serve on it
    import urllib.request

    sid = again.register(_session())
    with urllib.request.urlopen(f"{again.url}/s/{sid}", timeout=10) as response:
        assert response.status == 200
    again.shutdown()


def test_warm_up_serves_one_visit_and_keeps_no_session():
    srv = ShopServer()  # not started: warm_up goes through handle()
    made = []

    def factory():
        made.append(_session(5))
        return made[-1]

    srv.warm_up()  # no factory: nothing to warm
    assert made == []
    srv.new_session_factory = factory
    srv.warm_up("wool socks")
    assert len(made) == 1 and made[0].page == "results" and made[0].query == "wool socks"
    assert len(srv) == 0
    srv.shutdown()


def test_serve_mode_gives_each_visitor_a_new_goal(server):
    server.new_session_factory = lambda: _session(3)
    try:
        code, headers, _ = _get(server, "/")
        assert code == 302 and headers["Location"].startswith("/s/")
    finally:
        server.new_session_factory = None


def test_sessions_expire_least_recently_used_first_and_by_age():
    # not started: requests go through handle(). No session ages out during the LRU checks,
    # however slow the machine; the ttl is then cut to test expiry by age
    srv = ShopServer(max_sessions=3, ttl=3600)
    pinned = srv.register(_session(), pinned=True)
    sids = [srv.register(_session()) for _ in range(3)]
    # 4 sessions > 3: the least recently used unpinned one goes (a pinned one stays)
    assert len(srv) == 3 and _get(srv, f"/s/{sids[0]}")[0] == 410 and _get(srv, "/s/" + "0" * 32)[0] == 410
    assert _get(srv, f"/s/{sids[1]}")[0] == 200                     # used: sids[2] is now the oldest
    newest = srv.register(_session())
    assert [_get(srv, f"/s/{s}")[0] for s in (sids[1], sids[2], newest, pinned)] == [200, 410, 200, 200]
    import time

    srv.ttl = 0.2
    time.sleep(0.25)
    assert _get(srv, f"/s/{newest}")[0] == 410 and _get(srv, f"/s/{pinned}")[0] == 200
    for _ in range(2000):  # many visitors: the table stays bounded
        srv.register(_session())
    assert len(srv) <= 4 and srv.expired >= 2000
    srv.shutdown()


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
        # a search from a results or an item page (WebShop runs it; the page has no search box)
        browser.reset(options={"task_id": "goal-2"})
        text.reset(options={"task_id": "goal-2"})
        for action in ("search[wool socks]", "search[coffee beans] please", "click[next >]",
                       "click[next >]", "Search[tea]"):
            response = f"<think>x</think><action>{action}</action>"
            assert browser.step(response) == text.step(response)
        first = next(a for a in text.session.admissible() if a.startswith("click[b0"))
        response = f"<think>x</think><action>{first}</action>"
        assert browser.step(response) == text.step(response)
        response = "<think>x</think><action>search[bookshelves]</action>"
        assert browser.step(response) == text.step(response) and text.session.page == "results"
        # an action that is no element of the page is not sent to the site
        browser.reset(options={"task_id": "goal-1"})
        _, _, _, _, info = browser.step("<think>x</think><action>click[buy now]</action>")
        assert not info["action_valid"] and info["raw_observation"] == "Search"
        image = browser.render()
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3 and image.std() > 0
    finally:
        browser.close()
    assert browser.driver is None


def test_concurrent_shoppers_never_see_each_others_pages(server):
    import re
    import threading
    import urllib.request
    from urllib.parse import quote

    catalog, index = load_shop(None, 1000, 0)
    counter = iter(range(10_000))
    lock = threading.Lock()

    def factory():
        with lock:
            return ShopSession(catalog, index, catalog.goals[next(counter)])

    server.new_session_factory = factory
    problems, barrier = [], threading.Barrier(24)

    def shopper():
        try:
            barrier.wait()
            with urllib.request.urlopen(server.url + "/", timeout=30) as r:  # follows the redirect
                sid, page = r.url.rsplit("/", 1)[-1], r.read().decode()
            goal = re.search(r"Instruction: (.*?)</div>", page).group(1)
            words = goal.split(" with ")[0]
            with urllib.request.urlopen(f"{server.url}/s/{sid}/search?q={quote(words)}", timeout=30) as r:
                page = r.read().decode()
            if f"Instruction: {goal}</div>" not in page or "Total results" not in page:
                problems.append(sid)
        except Exception as e:  # noqa: BLE001 - reported below
            problems.append(repr(e))

    try:
        threads = [threading.Thread(target=shopper) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        server.new_session_factory = None
    assert problems == []
