"""WebShop: catalog and goals, WebShop's purchase score on hand-worked cases, BM25 search, the
site's page machine, the env's splits/anchors/rewards, the expert, and the official data files."""

import json

import gymnasium as gym
import numpy as np
import pytest

import arlgym  # noqa: F401
from arlgym.envs.webshop.catalog import (
    Catalog,
    Goal,
    Product,
    generate_catalog,
    goals_for,
    load_official_catalog,
)
from arlgym.envs.webshop.engine import parse_shop_action
from arlgym.envs.webshop.env import REWARD_WIN, split_range
from arlgym.envs.webshop.reward import purchase_score, token_set_ratio
from arlgym.envs.webshop.search import ProductIndex, build_bm25
from arlgym.errors import ConfigError, TaskNotFound


@pytest.fixture(autouse=True, scope="module")
def _own_cache(own_arlgym_cache):
    """Indexes and product stores go to a temporary cache, not the user's ~/.cache."""

SHIRT = Product(asin="B000000001", name="Acme Men's T-Shirt - Machine Washable", category="fashion",
                query="men's t-shirt", product_category="Clothing › Fashion › Men's T-Shirt",
                price=15.0, attributes=("machine washable", "short sleeve"),
                options={"color": ("black", "white"), "size": ("large", "x-large")},
                description="A cotton tee.", bullets=("Tumble dry low",),
                instruction="i need a men's t-shirt that is machine washable and short sleeve")
GOAL = Goal(asin=SHIRT.asin, instruction="…", attributes=("machine washable", "short sleeve", "tumble dry"),
            options={"color": "black", "size": "x-large"}, price_upper=20.0, query="men's t-shirt",
            name=SHIRT.name, product_category=SHIRT.product_category, category="fashion")


# ------------------------------------------------------------------------- score
def test_exact_purchase_scores_one():
    s = purchase_score(SHIRT, {"color": "black", "size": "x-large"}, GOAL)
    # 3 attributes (2 listed + "tumble dry" found in the bullets) + 2 options + price, of 6
    assert (s.attribute_matches, s.option_matches, s.price_ok, s.r_type, s.score) == (3, 2, True, 1.0, 1.0)


def test_partial_purchase_scores_by_webshop_formula():
    # color wrong ("white"), size not chosen: (3 + 0 + 1) / (3 + 2 + 1) = 4/6
    assert purchase_score(SHIRT, {"color": "white"}, GOAL).score == pytest.approx(4 / 6, abs=1e-6)
    dear = Product(**{**SHIRT.__dict__, "price": 25.0})
    # price over the bound: (3 + 2 + 0) / 6
    assert purchase_score(dear, {"color": "black", "size": "x-large"}, GOAL).score == pytest.approx(5 / 6, abs=1e-6)


def test_wrong_product_type_scales_the_score_down():
    lamp = Product(asin="B000000002", name="Lumen Floor Lamp", category="furniture", query="floor lamp",
                   product_category="Home & Kitchen › Furniture › Floor Lamp", price=10.0,
                   attributes=("machine washable",), options={"color": ("black",)})
    s = purchase_score(lamp, {"color": "black"}, GOAL)
    # no query, category or title overlap: r_type 0; its attribute/option/price matches don't count
    assert s.r_type == 0.0 and s.score == 0.0 and s.attribute_matches == 1 and s.option_matches == 1


def test_token_set_ratio_matches_thefuzz_on_known_pairs():
    # thefuzz.fuzz.token_set_ratio (Levenshtein ratio) gives 100, 100, 89, 83 for these
    assert token_set_ratio("navy blue", "blue") == 100      # subset -> 100
    assert token_set_ratio("X-Large", "large") == 100
    assert token_set_ratio("pack of 2", "pack of 3") == 89  # WebShop's known leniency: 2*8/18
    assert token_set_ratio("x-large", ("size", "large")) == 83  # 2*5/12: x-large is not large
    assert token_set_ratio("black", "white") < 50
    assert token_set_ratio("", "x") == 0


# ------------------------------------------------------------------------- catalog and search
def test_goals_are_one_per_option_combination_with_a_price_bound_above_the_price():
    goals = goals_for(SHIRT, np.random.default_rng(0))
    assert sorted(tuple(g.options.values()) for g in goals) == [
        ("black", "large"), ("black", "x-large"), ("white", "large"), ("white", "x-large")]
    g = goals[0]
    assert g.price_upper > SHIRT.price and g.price_upper in (20.0, 30.0, 40.0, 50.0)
    assert g.instruction.startswith(SHIRT.instruction + " with color: ")
    assert g.instruction.endswith(f", and price lower than {g.price_upper:.2f} dollars")


def test_synthetic_catalog_is_deterministic_and_every_goal_is_winnable():
    a, b = generate_catalog(200, seed=3), generate_catalog(200, seed=3)
    assert [g.instruction for g in a.goals] == [g.instruction for g in b.goals]
    assert len({p.asin for p in a.products}) == 200 and len({p.category for p in a.products}) == 5
    for g in a.goals:
        assert purchase_score(a.by_asin[g.asin], dict(g.options), g).score == 1.0


def _item(asin, name):
    return Product(asin=asin, name=name, category="fashion", query="", product_category="", price=1.0,
                   attributes=())


def _index(products):
    cat = Catalog(products, [])
    return ProductIndex(build_bm25(cat), cat.asin_of)


def test_bm25_ranks_by_matching_rare_words():
    index = _index([_item("A", "red running shoes"), _item("B", "blue running shoes"),
                    _item("C", "red wool socks")])
    # A has both words; B and C one each, both in 2 of 3 docs (equal idf, equal length): a tie
    assert index.search("red shoes") == ["A", "B", "C"]
    assert index.search("wool") == ["C"] and index.search("zzzz qqqq") == []
    assert index.search("running", k=1) == ["A"]           # ties keep catalog order
    assert index.search("sock") == ["C"] and index.search("the a of") == []  # stemmed; stop-words


def test_searching_a_goal_finds_its_product_on_the_first_page():
    cat = generate_catalog(300, seed=1)
    index = ProductIndex(build_bm25(cat), cat.asin_of)
    assert all(g.asin in index.search(g.instruction)[:10] for g in cat.goals[:100])


# ------------------------------------------------------------------------- env
def _env(**kwargs):
    return gym.make("arl/WebShop-v0", **kwargs).unwrapped


def test_pages_actions_and_admissible_lists():
    env = _env()
    prompt, info = env.reset(options={"task_id": "goal-0"})
    assert info["raw_observation"] == "Search"
    assert info["admissible_actions"] == ["search[<your query>]", "click[search]"]
    assert env.session.goal.instruction in prompt and "'search[<your query>]'" in prompt
    _, r, term, _, info = env.step("<think>t</think><action>search[bar stool]</action>")
    assert info["action_valid"] and not term and r == 0.0
    assert info["raw_observation"].startswith("Back to Search [SEP] Page 1 (Total results: ")
    first = next(a for a in info["admissible_actions"] if a.startswith("click[b0"))
    _, _, _, _, info = env.step(f"<think>t</think><action>{first}</action>")
    assert "click[buy now]" in info["admissible_actions"] and "click[description]" in info["admissible_actions"]
    _, _, _, _, info = env.step("<think>t</think><action>click[features]</action>")
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]"]
    _, _, _, _, info = env.step("<think>t</think><action>click[buy now]</action>")  # not on this page
    assert not info["action_valid"] and info["executed_action"] is None
    _, _, _, _, info = env.step("<think>t</think><action>click[< prev]</action>")
    assert "click[buy now]" in info["admissible_actions"]


def test_expert_wins_every_test_goal_and_reward_is_ten():
    env = _env()
    for task_id in env.list_tasks("test", limit=60):
        env.reset(options={"task_id": task_id})
        for _ in range(env.max_steps):
            _, reward, term, trunc, info = env.step(env.expert_response())
            if term or trunc:
                break
        assert term and info["won"] and info["score"] == 1.0 and reward == REWARD_WIN


def test_a_wrong_purchase_ends_with_partial_score_and_zero_reward():
    env = _env()
    env.reset(options={"task_id": "goal-3"})
    env.step(env.expert_response())            # search
    env.step(env.expert_response())            # open the target item
    _, reward, term, _, info = env.step("<think>t</think><action>click[buy now]</action>")  # no options
    assert term and reward == 0.0 and not info["won"]
    goal = env.session.goal
    expected = (len(goal.attributes) + 0 + 1) / (len(goal.attributes) + len(goal.options) + 1)
    assert info["score"] == pytest.approx(expected, abs=1e-6)


def test_anchor_is_the_page_state_not_the_wording():
    a, b = _env(), _env()
    ia = a.reset(options={"task_id": "goal-5"})[1]
    ib = b.reset(options={"task_id": "goal-5"})[1]
    assert ia["anchor"] == ib["anchor"]
    ia = a.step("<think>one</think><action>search[Green Tea]</action>")[4]
    ib = b.step("<think>other words</think><action>search[green tea]</action>")[4]
    assert ia["anchor"] == ib["anchor"]
    ic = b.step("<think>x</think><action>click[next >]</action>")[4]
    assert ic["anchor"] != ia["anchor"]


def test_splits_are_disjoint_and_task_ids_checked():
    n = len(generate_catalog().goals)
    (t0, t1), (v0, v1), (r0, r1) = (split_range(s, n) for s in ("test", "val", "train"))
    assert (t0, t1, v0, v1, r1) == (0, 500, 500, 600, n) and r0 == 600
    env = _env()
    assert env.list_tasks("test")[:2] == ["goal-0", "goal-1"] and len(env.list_tasks("val")) == 100
    _, info = env.reset(seed=4, options={"split": "train"})
    assert int(info["task_id"].split("-")[1]) >= 600
    with pytest.raises(TaskNotFound):
        env.reset(options={"task_id": f"goal-{n}"})
    with pytest.raises(ConfigError, match="unknown split"):
        env.reset(options={"split": "dev"})


def test_parse_shop_action():
    assert parse_shop_action("click[Buy Now]") == ("click", "buy now")
    assert parse_shop_action("search[Red Shoes]") == ("search", "red shoes")   # WebShop lower-cases
    assert parse_shop_action("search[q] please") == ("search", "q")
    for ignored in ("buy", " Click[Buy Now] ", "Search[q]", " search[q]", "click [buy now]", "search[]"):
        assert parse_shop_action(ignored) is None


def test_official_webshop_files_load(tmp_path):
    products = [{"asin": "B0TEST0001", "name": "Bright Citrus Deodorant", "pricing": "$10.99",
                 "category": "beauty", "query": "deodorant",
                 "product_category": "Beauty & Personal Care › Personal Care › Deodorants",
                 "full_description": "Long lasting.", "small_description": ["aluminum free"],
                 "customization_options": {"Scent": [{"value": "Citrus", "image": None},
                                                     {"value": "Lavender", "image": None}]}},
                {"asin": "B0TEST0002", "name": "No price", "pricing": ""},
                {"asin": "B0TEST0003", "name": "Range", "pricing": "$12.00 - $15.50",
                 "customization_options": {"Color": [{"value": "Black/White"}]}}]
    ins = {"B0TEST0001": {"instruction": "i need a long lasting deodorant",
                          "instruction_attributes": ["long lasting", "aluminum free"]}}
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(ins))
    cat = load_official_catalog(tmp_path / "items_shuffle_1000.json", tmp_path / "items_ins_v2_1000.json")
    assert [p.asin for p in cat.products] == ["B0TEST0001", "B0TEST0002", "B0TEST0003"]
    first, free, ranged = cat.products
    assert first.price == 10.99 and first.price_tag == "$10.99"
    assert free.price == 100.0 and free.price_tag == "$100.0"        # WebShop's default price
    assert 12.0 <= ranged.price <= 15.5 and ranged.price_tag == "$12.0 to $15.5"
    assert ranged.options == {"color": ("black | white",)}            # "/" written " | "
    assert first.attributes == ("DUMMY_ATTR",)                        # no full attribute list given
    assert first.options == {"scent": ("citrus", "lavender")}
    assert sorted(g.options["scent"] for g in cat.goals) == ["citrus", "lavender"]
    env = _env(data_dir=str(tmp_path))
    _, info = env.reset(options={"task_id": "goal-0"})
    for _ in range(6):
        _, reward, term, _, info = env.step(env.expert_response())
        if term:
            break
    assert info["won"] and reward == REWARD_WIN
    with pytest.raises(ConfigError, match="neither"):
        _env(data_dir=str(tmp_path / ".." / ".."))
    with pytest.raises(ConfigError, match="data_dir=.*missing.* is invalid: expected an existing folder"):
        _env(data_dir=str(tmp_path / "missing"))


def test_official_files_score_on_the_full_attribute_list_and_bound_prices_as_webshop(tmp_path):
    """WebShop's ``load_products``/``get_synthetic_goals``: a product's attributes are
    ``items_ins_v2``'s full ``attributes`` (scored), a goal's are its ``instruction_attributes``;
    bounds are drawn from 10 … 990, and a product priced above 980 gets none (no price text)."""
    from arlgym.envs.webshop.catalog import NO_BOUND, PRICE_RANGE

    products = [{"asin": "B0SHELF001", "name": "Oak Shelf", "pricing": "$15.00", "query": "shelf",
                 "product_category": "Home › Shelves", "full_description": "A shelf.", "small_description": ["oak"]},
                {"asin": "B0PIANO001", "name": "Grand Piano", "pricing": "$985.00", "query": "piano",
                 "product_category": "Music › Pianos", "full_description": "A piano.", "small_description": ["black"]}]
    ins = {"B0SHELF001": {"instruction": "i need a shelf that is easy to assemble",
                          "instruction_attributes": ["easy assemble"],
                          "attributes": ["easy assemble", "solid wood", "space saving"]},
           "B0PIANO001": {"instruction": "i want a grand piano", "instruction_attributes": ["grand"],
                          "attributes": ["grand"]}}
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(ins))
    cat = load_official_catalog(tmp_path / "items_shuffle_1000.json", tmp_path / "items_ins_v2_1000.json")
    shelf, piano = cat.by_asin["B0SHELF001"], cat.by_asin["B0PIANO001"]
    assert shelf.attributes == ("easy assemble", "solid wood", "space saving")
    goals = {g.asin: g for g in (cat.goals[i] for i in range(len(cat.goals)))}
    assert goals[shelf.asin].attributes == ("easy assemble",)
    assert goals[shelf.asin].price_upper in PRICE_RANGE[1:5]           # 20 … 50 for $15
    assert goals[piano.asin].price_upper == NO_BOUND and "price lower than" not in goals[piano.asin].instruction
    # "solid wood" is nowhere in the title, description or bullets: only the full list matches it
    goal = Goal(**{**goals[shelf.asin].__dict__, "attributes": ("solid wood",)})
    assert purchase_score(shelf, {}, goal).attribute_matches == 1
    assert purchase_score(Product(**{**shelf.__dict__, "attributes": ("DUMMY_ATTR",)}), {}, goal).attribute_matches == 0
