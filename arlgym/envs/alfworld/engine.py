"""Run ALFWorld games on TextWorld's PDDL engine, fast.

TextWorld's ``PddlEnv`` (with ALFWorld's ``AlfredDemangler``) is the reference. Per step it
grounds every applicable operator (Fast Downward, C++), then derives the text of *every*
admissible command through the grammar, which tatsu-parses the command template and every
grammar condition again; a reset translates the PDDL twice and re-parses the whole grammar.
Profiles put almost all of the step time in those parses.

:class:`AlfredGame` keeps the engine (the same Fast Downward library, ``PddlState``, grammar
rules, ``Demangler`` naming) and caches what does not change:

* the parsed domain + grammar, shared by every game with the same domain and grammar template
  (games differ only in the task sentence, which is swapped in as one rule);
* the PDDL->SAS translation of each problem (a reset reloads the SAS into the library);
* the text of each grounded command, per operator: ALFWorld's command templates read only the
  action's own arguments and static facts (``receptacleAtLocation``), so the text of an operator
  never changes during a game; templates that query changing predicates are derived every
  step;
* the parse of every grammar string and condition, so the per-step feedback is derived by walking
  pre-parsed symbols (same algorithm as ``ContextSensitiveGrammar.derive``).

The differential test (``tests/unit/envs/test_alfworld_engine.py``) plays thousands of random
steps in both engines and requires identical feedback, admissible lists and ``won``.

TextWorld is not thread-safe; each :class:`AlfredGame` loads its own copy of the Fast Downward
library (as ``PddlEnv`` does), so several games may live in one process but must be stepped
from one thread.

Memory stays bounded over any number of distinct games. Every cache here is an LRU with a
stated size (:data:`CACHE_LIMITS`), and TextWorld's own intern table is pruned: TextWorld makes
``Proposition`` and ``Signature`` objects through ``mementos``, whose module-level dict keeps
every proposition ever built, and ALFWorld's object names carry THOR coordinates, so each new
game adds thousands of propositions that are never freed (measured: ~1 MB per distinct game,
also in the unmodified ``PddlEnv``). :func:`prune_textworld_interning` drops the entries that
nothing but that table references; it runs when a game is loaded and the table has doubled
since the last prune. Propositions compare by value, so dropping an interned copy changes no
result.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from arlgym.envs.alfworld.generator import grammar_template
from arlgym.envs.requirements import import_for
from arlgym.errors import ArlgymError, LevelFormatError

__all__ = ["AlfredGame", "ReferenceGame", "load_game_file", "INVALID_FEEDBACK", "CACHE_LIMITS",
           "prune_textworld_interning", "cache_sizes"]

#: What TextWorld answers to a command that is not admissible.
INVALID_FEEDBACK = "Nothing happens."
_TASK_RULE = "Your task is to: UNKNOWN GOAL."
_EVAL_GLOBALS = {"__builtins__": builtins}


def _import_engine() -> Any:
    fast_downward, twlogic, misc, pddl_logic, textgen, game = import_for(
        "arl/ALFWorld-v0", "fast_downward", "textworld.logic", "alfworld.agents.utils.misc",
        "textworld.envs.pddl.logic", "textworld.envs.pddl.textgen", "textworld.generator.game")
    return fast_downward, twlogic, pddl_logic, textgen, game.EntityInfo, misc.Demangler


def load_game_file(path: str) -> dict[str, Any]:
    """Read a ``game.tw-pddl`` file (JSON with pddl_domain, grammar, pddl_problem)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise LevelFormatError(f"cannot read ALFWorld game file {path!r}: {e}") from e
    missing = {"pddl_domain", "grammar", "pddl_problem"} - set(data)
    if missing:
        raise LevelFormatError(f"{path!r} is not a game.tw-pddl file: missing {sorted(missing)}")
    return data


def _digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


#: Entries kept by each process-wide cache (least recently used evicted first). A translated
#: game (PDDL->SAS task, initial facts) is the big one, ~0.3-1 MB.
CACHE_LIMITS: dict[str, int] = {
    "logic": 4,            # parsed domain + grammar template (one per domain/grammar pair)
    "parsed": 4096,        # grammar strings -> parsed symbols (templates, task sentences)
    "queries": 4096,       # grammar conditions -> parsed queries
    "code": 4096,          # compiled grammar expressions, static-template verdicts
    "translations": 64,    # games: PDDL->SAS translation and initial facts
    "games": 64,           # games: command texts per operator, entity names
}
#: Prune TextWorld's intern table when it holds more than this many entries (and has doubled
#: since the last prune).
INTERN_PRUNE_FLOOR = 50_000


class _LRU(OrderedDict):
    """An ``OrderedDict`` that keeps its ``limit`` most recently used entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            value = self[key]
        except KeyError:
            return default
        self.move_to_end(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class _Shared:
    """Process-wide caches (parsed logic, parsed strings, translations), each an LRU."""

    logic = _LRU(CACHE_LIMITS["logic"])
    parsed = _LRU(CACHE_LIMITS["parsed"])
    queries = _LRU(CACHE_LIMITS["queries"])
    code = _LRU(CACHE_LIMITS["code"])
    translations = _LRU(CACHE_LIMITS["translations"])
    #: per game: operator name -> command text, and the named entity infos
    games = _LRU(CACHE_LIMITS["games"])
    #: size of TextWorld's intern table after the last prune
    interned_after_prune = 0


def _memento_table() -> dict | None:
    try:
        import mementos.core as core
    except ImportError:  # pragma: no cover - textworld depends on mementos
        return None
    table = getattr(core, "_memento_cache", None)
    return table if isinstance(table, dict) else None


def prune_textworld_interning(force: bool = False) -> int:
    """Drop TextWorld's interned ``Proposition``/``Signature`` objects that nothing else uses.

    Runs when ``force`` or when the table holds more than :data:`INTERN_PRUNE_FLOOR` entries
    and twice as many as after the last prune (so the scans cost O(1) amortised per entry).
    Returns the number of entries dropped.
    """
    import sys

    table = _memento_table()
    if table is None:
        return 0
    size = len(table)
    if not force and (size <= INTERN_PRUNE_FLOOR or size <= 2 * _Shared.interned_after_prune):
        return 0
    dropped = 0
    for key in list(table):
        obj = table.get(key)
        # References: the table's value, the local ``obj`` and getrefcount's argument.
        if obj is not None and sys.getrefcount(obj) <= 3:
            del table[key]
            dropped += 1
    obj = None
    _Shared.interned_after_prune = len(table)
    return dropped


def cache_sizes() -> dict[str, int]:
    """Current entries of every process-wide cache (and of TextWorld's intern table)."""
    sizes = {name: len(getattr(_Shared, name)) for name in CACHE_LIMITS}
    table = _memento_table()
    sizes["textworld_interned"] = len(table) if table is not None else 0
    return sizes


# Fast Downward keeps its task in globals, so every engine needs its own copy of the library
# (fast_downward.load_lib copies the .so). Unloading a copy (dlclose) and loading a new one
# later in the same process was seen to segfault, so closed engines hand their copy back to
# this pool (after ``cleanup()``) and new engines reuse it instead of loading another.
_FREE_LIBS: list[Any] = []


class _CommandText:
    """The text side of :class:`AlfredGame`: the command of each grounded operator, derived
    from the game's grammar over pre-parsed, shared symbols, and whether a template derives the
    same in every state (then its command is cached; see the module doc)."""

    def _mapping(self, op_name: str) -> dict[Any, Any]:
        splits = op_name.split()
        name, arguments = splits[0], splits[1:]
        return {self._twlogic.Placeholder(p.name.strip("?"), p.type_name):
                self._twlogic.Variable(arg, p.type_name)
                for p, arg in zip(self.state._actions[name].parameters, arguments,
                                  strict=False)}

    def _derive_command(self, op_name: str) -> tuple[str, bool]:
        """The command text of one grounded operator, and whether it can be cached."""
        action_name = op_name.split()[0]
        template = self._logic.actions[action_name].template
        mapping = self._mapping(op_name)
        ctx = self._context(mapping, {ph.name: self._entity_infos[var.name]
                                      for ph, var in mapping.items()})
        derived = self.derive(template, ctx)
        action = self._twlogic.Action(name=action_name, preconditions=[], postconditions=[])
        action.mapping = mapping
        action.command_template = derived
        names = {k: info.name for k, info in self._entity_infos.items()}
        return action.format_command(names), self._is_static(template)

    def _is_static(self, text: str) -> bool:
        """Whether ``text`` derives to the same string in every state of the game."""
        # The verdict depends on the template and the domain's rules only, not on the game.
        cache_key = ("static", self._logic_key, text)
        cached = _Shared.code.get(cache_key)
        if cached is not None:
            return cached
        dynamic = self._dynamic_predicates()
        ok = True
        stack = list(self._parse(text))
        while stack and ok:
            sym = stack.pop()
            if isinstance(sym, self._textgen.NonterminalSymbol):
                ok = False  # rules may carry conditions on any predicate
            elif isinstance(sym, self._textgen.ListSymbol):
                stack.append(sym.symbol)
            elif isinstance(sym, self._textgen.ConditionalSymbol):
                stack.append(sym.expression)
                rule = self._query(sym.given) if sym.given else None
                if rule is not None:
                    preds = {p.name.removeprefix("not_") for p in rule.preconditions}
                    ok = not (preds & dynamic)
        _Shared.code[cache_key] = ok
        return ok

    def _dynamic_predicates(self) -> set[str]:
        key = ("dynamic", self._logic_key)
        hit = _Shared.code.get(key)
        if hit is None:
            hit = set()
            for action in self.state.task.actions:
                for eff in action.effects:
                    hit.add(eff.literal.predicate.lower())
            _Shared.code[key] = hit
        return hit

    # ------------------------------------------------------------------ text derivation
    def _context(self, mapping: dict, variables: dict) -> dict[str, Any]:
        return {"state": self.state, "mapping": mapping, "variables": variables,
                "entity_infos": self._entity_infos}

    def _parse(self, text: str) -> list:
        hit = _Shared.parsed.get(text)
        if hit is None:
            hit = self._textgen._parse_and_convert(text, rule_name="symbols")
            _Shared.parsed[text] = hit
        return hit

    def _query(self, expression: str) -> Any:
        hit = _Shared.queries.get(expression)
        if hit is None:
            hit = self._twlogic.Rule.parse_conjunctive_query(expression)
            _Shared.queries[expression] = hit
        return hit

    def derive(self, text: str, ctx: dict[str, Any]) -> str:
        """``ContextSensitiveGrammar.derive(text, ctx)`` over pre-parsed, shared symbols."""
        out: list[str] = []
        for sym in self._parse(text):
            self._expand(sym, ctx, out)
        return "".join(out)

    def _assignments(self, expression: str, ctx: dict[str, Any]) -> list[dict[str, Any]]:
        contexts = []
        for mapping in ctx["state"].all_assignments(self._query(expression), ctx["mapping"]):
            infos = ctx["entity_infos"]
            variables = dict(ctx["variables"])
            variables.update({ph.name: infos[var.name] for ph, var in mapping.items()})
            new_mapping = dict(ctx["mapping"])
            new_mapping.update(mapping)
            contexts.append({"state": ctx["state"], "mapping": new_mapping,
                             "variables": variables, "entity_infos": infos})
        return contexts

    def _expand(self, sym: Any, ctx: dict[str, Any], out: list[str]) -> None:
        tg = self._textgen
        if isinstance(sym, tg.TerminalSymbol):
            out.append(str(sym.symbol))
        elif isinstance(sym, tg.NonterminalSymbol):
            name = str(sym)
            rules = self._rules.get(name)
            if not rules:
                raise tg.CSGUnknownSymbolError(sym)
            chosen = None
            for rule in rules:
                if not rule.condition or any(True for _ in ctx["state"].all_assignments(
                        self._query(rule.condition), ctx["mapping"])):
                    chosen = rule
                    break
            if chosen is None:
                raise IndexError(f"no applicable production for #{name}#")
            for child in chosen.rhs:
                self._expand(child, ctx, out)
        elif isinstance(sym, tg.ConditionalSymbol):
            for c in (self._assignments(sym.given, ctx) if sym.given else [ctx]):
                self._expand(sym.expression, c, out)
        elif isinstance(sym, tg.EvalSymbol):
            code = _Shared.code.get(sym.expression)
            if code is None:
                code = compile(sym.expression, "<grammar>", "eval")
                _Shared.code[sym.expression] = code
            out.append(str(eval(code, _EVAL_GLOBALS, dict(ctx["variables"]))))
        elif isinstance(sym, tg.ListSymbol):
            inner = sym.symbol
            if isinstance(inner, tg.ConditionalSymbol):
                items = [(inner.expression, c) for c in
                         (self._assignments(inner.given, ctx) if inner.given else [ctx])]
            else:
                items = [(inner, ctx)]
            if not items:
                self._expand(tg.NonterminalSymbol("list_empty"), ctx, out)
            for i, (item, c) in enumerate(items):
                if i:
                    sep = "list_last_separator" if i == len(items) - 1 else "list_separator"
                    self._expand(tg.NonterminalSymbol(sep), ctx, out)
                self._expand(item, c, out)
        else:
            raise NotImplementedError(f"unknown grammar symbol {sym!r}")


class AlfredGame(_CommandText):
    """One ALFWorld game on the real engine, with the caches described in the module doc.

    >>> game = AlfredGame()
    >>> game.load(game_json)            # doctest: +SKIP
    >>> intro = game.reset()            # doctest: +SKIP
    >>> feedback = game.step("look")    # doctest: +SKIP
    """

    def __init__(self) -> None:
        (self._fd, self._twlogic, self._pddl_logic, self._textgen, self._EntityInfo,
         self._Demangler) = _import_engine()
        self._lib = _FREE_LIBS.pop() if _FREE_LIBS else self._fd.load_lib()
        self._game: dict[str, Any] | None = None
        self._key = ""
        self.state: Any = None
        self.won = False
        self.feedback = ""
        self._commands: dict[str, str] = {}
        self._replan_loaded = False
        self._sas_cache: tuple[tuple[str, str], bytes] | None = None
        self._logic_key = ""

    # ------------------------------------------------------------------ loading
    def load(self, game: Mapping[str, Any]) -> None:
        """Use ``game`` (``game.tw-pddl`` content) for the next resets."""
        domain, grammar, problem = game["pddl_domain"], game["grammar"], game["pddl_problem"]
        key = _digest(domain, grammar, problem)
        if key == self._key:
            return
        self._game = dict(game)
        self._key = key
        self._logic, self._rules = self._logic_for(domain, grammar)
        per_game = _Shared.games.get(key)
        if per_game is None:
            per_game = {"commands": {}, "entity_infos": None}
            _Shared.games[key] = per_game
            prune_textworld_interning()
        self._per_game = per_game
        self._commands = per_game["commands"]  # operator name -> command text
        self._entity_infos: dict[str, Any] | None = per_game["entity_infos"]

    def _logic_for(self, domain: str, grammar: str) -> tuple[Any, dict[str, list]]:
        """The parsed GameLogic shared across games, and this game's grammar rules."""
        template = grammar_template()
        prefix, _, suffix = template.partition("UNKNOWN GOAL")
        task: str | None = None
        base = grammar
        if (grammar.startswith(prefix) and grammar.endswith(suffix)
                and len(grammar) >= len(prefix) + len(suffix) and _TASK_RULE in template):
            task = grammar[len(prefix):len(grammar) - len(suffix)]
            base = template
        lkey = _digest(domain, base)
        self._logic_key = lkey
        logic = _Shared.logic.get(lkey)
        if logic is None:
            logic = self._pddl_logic.GameLogic(domain=domain, grammar=base)
            _Shared.logic[lkey] = logic
        rules = dict(logic.grammar._rules)
        if task is not None:
            # The task sentence as the grammar's JSON string would decode it.
            text = json.loads('"' + _TASK_RULE.replace("UNKNOWN GOAL", task) + '"')
            rule = self._textgen.ProductionRule(lhs="task", rhs=self._parse(text))
            rules["task"] = [rule]
        return logic, rules

    def _translation(self) -> Any:
        assert self._game is not None
        key = _digest(self._game["pddl_domain"], self._game["pddl_problem"])
        hit = _Shared.translations.get(key)
        if hit is None:
            task, sas = _pddl2sas(self._fd, self._logic.domain, self._game["pddl_problem"])
            hit = {"task": task, "sas": sas, "sas_replan": None}
            _Shared.translations[key] = hit
        return hit

    def _new_state(self) -> Any:
        """A ``PddlState`` built from the cached translation (same steps as its __init__)."""
        from collections import Counter, defaultdict

        tr = self._translation()
        state = object.__new__(self._pddl_logic.PddlState)
        state._facts = defaultdict(set)
        state._vars_by_name = {}
        state._vars_by_type = defaultdict(set)
        state._var_counts = Counter()
        state._logic = self._logic
        state.downward_lib = self._lib
        state.pddl_problem = self._game["pddl_problem"]
        state.task, state.sas, state.sas_replan = tr["task"], tr["sas"], tr["sas_replan"]
        state._actions = {a.name: a for a in state.task.actions}
        for type_ in state.task.types:
            try:
                self._logic.types.add(self._twlogic.Type(type_.name, type_.supertype_names))
            except ValueError:
                pass
        self._lib.load_sas(state.sas.encode("utf-8"))
        self._replan_loaded = False
        state.name2type = {o.name: o.type_name for o in state.task.objects}
        init = tr.get("init_facts")
        if init is None:
            init = []
            for atom in state.task.init:
                prop = _atom_to_proposition(self._fd, self._twlogic, atom, state.name2type)
                if prop is not None:
                    init.append(prop)
            atoms = (self._pddl_logic.Atom * self._lib.get_state_size())()
            self._lib.get_state(atoms)
            init2 = [a.get_fact(state.name2type) for a in atoms]
            tr["init_facts"] = init = (init, [f for f in init2 if not f.is_negation])
        state.add_facts(init[0])
        state.add_facts(init[1])
        return state

    def _names(self, shuffle_seed: int | None = None) -> dict[str, Any]:
        """Entity infos named like ALFWorld's AlfredDemangler ("apple 1").

        With ``shuffle_seed``, the numbering is shuffled as ALFWorld's ``domain_randomization``
        does (its own ``Demangler(shuffle=True)``, which shuffles with the global ``random``
        module; that generator is seeded for the call and then put back as it was).
        """
        infos = {v.name: self._EntityInfo(v.name, v.type)
                 for fact in self.state.facts for v in fact.arguments}
        for info in infos.values():
            info.name = info.id
            info.definite = "the"
            info.indefinite = "a"
        if shuffle_seed is None:
            demangler = self._Demangler(game_infos=infos)
        else:
            import random

            saved = random.getstate()
            random.seed(int(shuffle_seed))
            try:
                demangler = self._Demangler(game_infos=infos, shuffle=True)
            finally:
                random.setstate(saved)
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        return infos

    # ------------------------------------------------------------------ playing
    def reset(self, shuffle_seed: int | None = None) -> str:
        """Start the loaded game; returns the intro text.

        ``shuffle_seed`` (ALFWorld's ``domain_randomization``): number the objects in a
        shuffled order drawn from this seed ("apple 1" may become "apple 3"); ``None`` keeps
        ALFWorld's default numbering.
        """
        if self._game is None:
            raise ArlgymError("AlfredGame.reset() before load()")
        self.state = self._new_state()
        if shuffle_seed is not None:
            # Command texts depend on the names: this episode gets its own command cache.
            self._entity_infos = self._names(shuffle_seed)
            self._commands = {}
        else:
            self._commands = self._per_game["commands"]
            self._entity_infos = self._per_game["entity_infos"]
        if self._entity_infos is None:
            self._entity_infos = self._per_game["entity_infos"] = self._names()
        ctx = self._context({}, {})
        self.feedback = self.derive("#intro#", ctx)
        self._refresh()
        return self.feedback

    def step(self, command: str) -> str:
        """Execute ``command``; an inadmissible one changes nothing ("Nothing happens.")."""
        command = command.strip()
        op = self._by_command.get(command)
        if op is None:
            self.feedback = INVALID_FEEDBACK
        else:
            name = op.name
            effects = (self._pddl_logic.Atom * op.nb_effect_atoms)()
            self._lib.apply_operator(op.id, effects)
            n2t = self.state.name2type
            for effect in effects:
                prop = effect.get_fact(n2t)
                self.state.remove_fact(prop.negate())
                self.state.add_fact(prop)
            mapping = self._mapping(name)
            ctx = self._context(mapping, {ph.name: self._entity_infos[var.name]
                                          for ph, var in mapping.items()})
            action_name = name.split()[0]
            self.feedback = self.derive(self._logic.actions[action_name].feedback_rule, ctx)
        self._refresh()
        return self.feedback

    def _refresh(self) -> None:
        """Applicable operators -> command texts (cached per operator) and ``won``."""
        lib = self._lib
        count = lib.get_applicable_operators_count()
        ops = (self._fd.Operator * count)()
        lib.get_applicable_operators(ops)
        by_command: dict[str, Any] = {}
        seen: set[str] = set()
        for op in ops:
            name = op.name
            if name in seen:
                continue
            seen.add(name)
            command = self._commands.get(name)
            if command is None:
                command, static = self._derive_command(name)
                if static:
                    self._commands[name] = command
            by_command.setdefault(command, op)
        self._by_command = by_command
        self.admissible_commands = sorted(by_command)
        self.won = bool(lib.check_goal())

    # ------------------------------------------------------------------ queries
    def facts(self) -> tuple[str, ...]:
        """The PDDL state as sorted fact strings (the anchor of GiGPO)."""
        return tuple(sorted(str(f) for f in self.state.facts))

    def entity_names(self) -> dict[str, str]:
        """PDDL id -> displayed name ("apple_bar__plus_01..." -> "apple 1")."""
        return {k: v.name for k, v in (self._entity_infos or {}).items()}

    def plan(self) -> list[str]:
        """An optimal plan from the current state (Fast Downward), as commands."""
        tr = self._translation()
        if tr["sas_replan"] is None:
            _, sas_replan = _pddl2sas(self._fd, self._logic.domain,
                                      self._game["pddl_problem"], optimize=True)
            tr["sas_replan"] = _pack(sas_replan)
        if not self._replan_loaded:
            self._lib.load_sas_replan(zlib.decompress(tr["sas_replan"]))
            self._replan_loaded = True
        return list(self.state.replan(self._entity_infos))

    def close(self) -> None:
        if getattr(self, "_lib", None) is not None:
            try:
                self._lib.cleanup()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            _FREE_LIBS.append(self._lib)
            self._lib = None


def _pack(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), 1)


def _pddl2sas(fd: Any, domain: str, problem: str, optimize: bool = False) -> tuple[Any, str]:
    """Fast Downward's translation; it overwrites ``sys.argv``, which we put back."""
    import sys

    argv = list(sys.argv)
    try:
        return fd.pddl2sas(domain, problem, optimize=optimize)
    finally:
        sys.argv[:] = argv


def _atom_to_proposition(fd: Any, twlogic: Any, atom: Any, name2type: dict[str, str]) -> Any:
    """PddlState's conversion of an initial-state atom (``None`` for ``=`` and costs)."""
    if isinstance(atom, fd.translate.pddl.conditions.Atom):
        if atom.predicate == "=":
            return None
        return twlogic.Proposition(atom.predicate,
                                   [twlogic.Variable(a, name2type[a]) for a in atom.args])
    if isinstance(atom, fd.translate.pddl.f_expression.Assign):
        if atom.fluent.symbol == "total-cost":
            return None
        name = f"{atom.expression.value}"
        if str.isdigit(name):
            return None
        return twlogic.Proposition(name, [twlogic.Variable(a, name2type[a])
                                          for a in atom.fluent.args])
    return None


class ReferenceGame:
    """The unmodified engine: TextWorld ``PddlEnv`` + ALFWorld's ``AlfredDemangler``."""

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(admissible_commands=True, won=True)
        self.env = AlfredDemangler(PddlEnv(infos))
        self.state: Any = None

    def load(self, game: Mapping[str, Any]) -> None:
        self.env.load(dict(game))

    def reset(self) -> str:
        self.state = self.env.reset()
        return self.state.feedback

    def step(self, command: str) -> str:
        self.state, _, _ = self.env.step(command)
        return self.state.feedback

    @property
    def admissible_commands(self) -> list[str]:
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    def facts(self) -> tuple[str, ...]:
        return tuple(sorted(str(f) for f in self.env._pddl_state.facts))
