"""``arl/WebShop-v0``: find and buy the product an instruction describes (paper §5, H.1.2).

The agent searches (``search[query]``), pages through results, opens items, picks options and
clicks ``buy now``; the episode ends at the purchase. Reward (ARLArena): 10 when the purchase
scores 1.0, else 0, minus 0.1 for an invalid format; ``info["score"]`` is WebShop's partial
purchase score (:func:`~arlgym.envs.webshop.reward.purchase_score`), ``won`` is score == 1.
An action that is not ``search[...]``/``click[...]`` of an element on the page is a no-op with
``action_valid=False``. 15 steps (Table 6), 2-turn history window.

Data: a seeded synthetic catalog (``num_products``: 1,000 by default, up to WebShop's full
1.18M; WebShop's five categories, two goals a product) or ``data_dir=`` a folder with WebShop's
``items_shuffle_1000.json`` and ``items_ins_v2_1000.json`` (or the full-size files), read with
WebShop's conventions, with its synthetic or (``goal_source="human"``) human goals. The catalog
and its search index are built once per process and shared by every env; the index is also
cached on disk (:func:`~arlgym.envs.webshop.search.shared_index`).

Splits over the goal list (shuffled with WebShop's fixed seed 233, so they are the same in every
process): ``test`` = the first 500 goals (WebShop / verl-agent), ``val`` = the next 100,
``train`` = the rest less every goal that shares a request or a target product with a test or
val goal (:mod:`~arlgym.envs.webshop.splits`). The anchor hashes the page state: goal, page,
query, result page, item, chosen options, tab.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, ClassVar

from arlgym.core.env import ActResult, AgentEnv, TaskSpec
from arlgym.core.prompts import WEBSHOP, HistoryEntry, format_admissible, render_prompt
from arlgym.core.validation import check_choice, check_int, check_path
from arlgym.envs.requirements import require
from arlgym.envs.webshop.catalog import (
    MAX_PRODUCTS,
    Catalog,
    SyntheticCatalog,
    generate_catalog,
    load_official_catalog,
)
from arlgym.envs.webshop.engine import RESULTS_PER_PAGE, ShopSession, parse_shop_action
from arlgym.envs.webshop.reward import token_set_ratio
from arlgym.envs.webshop.search import ProductIndex, shared_index
from arlgym.envs.webshop.splits import HeldOutGoals, goal_content_key, split_range
from arlgym.errors import ConfigError, TaskNotFound

__all__ = ["WebShopEnv", "REWARD_WIN", "split_range", "load_shop"]

REWARD_WIN = 10.0
_TASK_ID = re.compile(r"^goal-(\d+)$")
_OFFICIAL_FILES = (("items_shuffle_1000.json", "items_ins_v2_1000.json"),
                   ("items_shuffle.json", "items_ins_v2.json"))
_HUMAN_FILE = "items_human_ins.json"
_GOAL_SOURCES = ("synthetic", "human")

_CACHE: dict[tuple, Catalog | SyntheticCatalog] = {}
_CACHE_LOCK = threading.Lock()


def load_shop(data_dir: str | Path | None, num_products: int = 1000, catalog_seed: int = 0,
              goal_source: str = "synthetic") -> tuple[Catalog | SyntheticCatalog, ProductIndex]:
    """The catalog and its search index, each built once per process (the index also cached on
    disk, see :func:`~arlgym.envs.webshop.search.shared_index`)."""
    where = "arl/WebShop-v0"
    num_products = check_int("num_products", num_products, min=5, max=MAX_PRODUCTS, example=1000, where=where)
    catalog_seed = check_int("catalog_seed", catalog_seed, min=0, max=2**63 - 1, example=0, where=where)
    goal_source = check_choice("goal_source", goal_source, _GOAL_SOURCES, where=where)
    data_dir = check_path("data_dir", data_dir, kind="dir", allow_none=True, where=where,
                          fix="give the folder holding WebShop's items_shuffle_1000.json and items_ins_v2_1000.json")
    if data_dir is None and goal_source == "human":
        raise ConfigError("goal_source='human' needs data_dir= a folder with WebShop's "
                          "items_human_ins.json (the synthetic catalog has synthetic goals only)")
    key = (None if data_dir is None else str(data_dir), num_products, catalog_seed, goal_source)
    with _CACHE_LOCK:
        if key not in _CACHE:
            if data_dir is None:
                catalog: Catalog | SyntheticCatalog = generate_catalog(num_products, catalog_seed)
            else:
                folder = Path(data_dir)
                found = [(folder / a, folder / b) for a, b in _OFFICIAL_FILES
                         if (folder / a).is_file() and (folder / b).is_file()]
                if not found:
                    raise ConfigError(f"WebShop data_dir {str(data_dir)!r} holds neither items_shuffle_1000.json + "
                                      "items_ins_v2_1000.json nor items_shuffle.json + items_ins_v2.json")
                catalog = load_official_catalog(*found[0], seed=catalog_seed, goal_source=goal_source,
                                                human_file=folder / _HUMAN_FILE)
            _CACHE[key] = catalog
        catalog = _CACHE[key]
    return catalog, shared_index(catalog)


class WebShopEnv(AgentEnv):
    """Text WebShop; see the module docstring.

    Args:
        data_dir: folder with WebShop's official product files (``None``: synthetic catalog).
        num_products: size of the synthetic catalog (5 … 2,000,000; WebShop's full size is 1,181,436).
        catalog_seed: seed of the synthetic catalog and of the goals' price bounds.
        goal_source: ``"synthetic"`` (WebShop's generated instructions) or ``"human"`` (its
            crowd-written ``items_human_ins.json``; needs ``data_dir``).
        max_steps: steps per episode (Table 6: 15).
        **kwargs: the :class:`~arlgym.core.env.AgentEnv` options.
    """

    default_max_steps: ClassVar[int] = 15

    def __init__(self, data_dir: str | Path | None = None, num_products: int = 1000,
                 catalog_seed: int = 0, goal_source: str = "synthetic", max_steps: int | None = None,
                 **kwargs: Any) -> None:
        require(getattr(self, "spec_id", "arl/WebShop-v0"))
        super().__init__(max_steps=max_steps, **kwargs)
        self.catalog, self.index = load_shop(data_dir, num_products, catalog_seed, goal_source)
        self.session: ShopSession | None = None
        self._held_out: HeldOutGoals | None = None
        self._last_score = 0.0
        self._searches = 0

    # ------------------------------------------------------------------ tasks
    def _load_task(self, seed: int | None, options: dict[str, Any]) -> TaskSpec:
        goals = self.catalog.goals
        if "task_id" in options:
            match = _TASK_ID.match(str(options["task_id"]))
            if not match or int(match.group(1)) >= len(goals):
                raise TaskNotFound(f"task_id {options['task_id']!r} is not a goal id 'goal-<n>' "
                                   f"with n < {len(goals)}")
            index = int(match.group(1))
        else:
            split = options.get("split", "train")
            low, high = split_range(split, len(goals))
            if split == "train":  # raises ConfigError, naming the fix, when nothing is left
                index = self.held_out.draw_train(self.catalog, self.np_random)
            else:
                index = int(self.np_random.integers(low, high))
        goal = goals[index]
        self.session = ShopSession(self.catalog, self.index, goal)
        self._last_score = 0.0
        self._searches = 0
        return TaskSpec(task_id=f"goal-{index}", observation=self.session.observation(),
                        task_type=goal.category, description=goal.instruction)

    @property
    def held_out(self) -> HeldOutGoals:
        """The test and val goals' requests and products, which train goals must not share."""
        if self._held_out is None:
            self._held_out = HeldOutGoals.of(self.catalog)
        return self._held_out

    def list_tasks(self, split: str = "test", limit: int | None = None) -> list[str]:
        """Goal ids of ``split``; ``train`` lists only goals sharing nothing with test/val
        (a scan of the train range: slow for a million-product catalog)."""
        low, high = split_range(split, len(self.catalog.goals))
        if split == "train":
            ids = [f"goal-{i}" for i in self.held_out.train_indices(self.catalog)]
        else:
            ids = [f"goal-{i}" for i in range(low, high)]
        return ids if limit is None else ids[:limit]

    def task_content_key(self, task_id: str) -> str:
        """The request of goal ``task_id``
        (:func:`~arlgym.envs.webshop.splits.goal_content_key`: its instruction, price clause
        dropped)."""
        match = _TASK_ID.match(task_id)
        goals = self.catalog.goals
        if not match or int(match.group(1)) >= len(goals):
            raise TaskNotFound(f"task_id {task_id!r} is not a goal id 'goal-<n>' with n < {len(goals)}")
        return goal_content_key(goals[int(match.group(1))])

    # ------------------------------------------------------------------ hooks
    def _act(self, action: str) -> ActResult:
        assert self.session is not None
        step = self.session.act(action)
        parsed = parse_shop_action(action)
        if step.valid and parsed is not None and parsed[0] == "search":
            self._searches += 1
        if step.done:
            assert step.score is not None
            self._last_score = step.score.score
            won = step.score.score >= 1.0
            feedback = (f"You have bought {self.session.purchased}. Score: {step.score.score:.2f}")
            return ActResult(feedback, REWARD_WIN if won else 0.0, True, True, action.strip())
        return ActResult(self.session.observation(), 0.0, False, step.valid,
                         action.strip() if step.valid else None)

    def _noop_result(self, feedback: str) -> ActResult:
        assert self.session is not None
        return ActResult(self.session.observation(), 0.0, False, False, None)

    def _anchor_state(self) -> Any:
        assert self.session is not None
        return self.session.state()

    def _admissible(self) -> list[str]:
        assert self.session is not None
        return [] if self.session.purchased else self.session.admissible()

    def _won(self) -> bool:
        return self._last_score >= 1.0

    def _score(self) -> float:
        return self._last_score

    def _prompt(self, history: list[HistoryEntry]) -> str:
        assert self.session is not None
        return render_prompt(WEBSHOP, current_observation=self.raw_observation, history=history,
                             history_length=self.history_length,
                             task_description=self.session.goal.instruction,
                             admissible_actions=format_admissible(self._admissible()))

    # ------------------------------------------------------------------ expert
    def expert_action(self) -> str:
        """What a shopper who knows the target product does next: search the request (then, if
        the target was not among its results, its title), page to the target, open it, pick the
        goal's options, buy."""
        s = self.session
        assert s is not None
        goal = s.goal
        request = re.split(r" with |, and price", goal.instruction)[0]
        if s.page == "search":
            return f"search[{request if self._searches == 0 else goal.name.lower()}]"
        if s.page == "tab":
            return "click[< prev]"
        if s.page == "results":
            if goal.asin in s.page_results():
                return f"click[{goal.asin.lower()}]"
            if goal.asin in s.results[s.page_no * RESULTS_PER_PAGE:]:
                return "click[next >]"
            if self._searches < 2:
                return f"search[{goal.name.lower()}]"  # WebShop searches from a results page too
            return "click[back to search]"
        if s.asin != goal.asin:
            return "click[< prev]"
        values = [v for vs in s.product.options.values() for v in vs] if s.product else []
        wanted = ([goal.options[n] for n in sorted(goal.options)] if isinstance(goal.options, dict)
                  else list(goal.options))
        for want in wanted:
            if want in values:
                pick = want
            else:  # a human goal's wording: the product's closest option value, if close enough
                ratio, pick = max(((token_set_ratio(v, want), v) for v in values), default=(0, ""))
                if ratio <= 85:
                    continue
            if pick not in s.chosen.values():
                return f"click[{pick}]"
        return "click[buy now]"

    def expert_response(self) -> str:
        action = self.expert_action()
        return f"<think>the target matches the request; next: {action}</think><action>{action}</action>"
