"""Product search: Okapi BM25 over a sparse term-by-document matrix, built once per catalog.

WebShop searches with a pyserini (Lucene) BM25 index: k1 = 0.9, b = 0.4, English analysis
(lower case, possessive ``'s`` dropped, Lucene's 33 English stop-words, Porter stemming), top 50
(``SEARCH_RETURN_N``). Pyserini needs Java 21, so arlgym has its own index with the same
analysis: :class:`Analyzer` (Porter stemming by PyStemmer's C Snowball stemmer) and
:class:`BM25` (per-term posting lists as CSC arrays: ``indptr``, document ids, precomputed
BM25 weights). A query adds the posting lists of its terms into a dense score vector and takes
the top k with ties broken by catalog order, as Lucene breaks them by doc id. One deliberate
difference: a short irregular-plural table (``shelves`` → ``shelf``, ``knives`` → ``knife``, …)
runs before the stemmer, so "bookshelves" finds bookshelves (Lucene's Porter filter leaves
``bookshelv`` ≠ ``bookshelf``).

The index is built once per catalog and shared: :func:`shared_index` keeps one per catalog
fingerprint in the process and caches the arrays on disk (``$ARLGYM_CACHE_DIR`` or
``~/.cache/arlgym``, under ``webshop/<fingerprint>/``), so a second ``gymnasium.make`` or a
worker process memory-maps them instead of rebuilding. Building streams documents in chunks,
so memory stays at the size of the finished index (about 8 bytes per posting).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from arlgym.errors import MissingDependency

__all__ = ["SEARCH_RETURN_N", "STOP_WORDS", "Analyzer", "BM25", "ProductIndex", "shared_index",
           "cache_root", "product_document"]

#: results a search returns (WebShop's SEARCH_RETURN_N); shown 10 per page
SEARCH_RETURN_N = 50
#: Lucene's English stop-word set (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``), as pyserini uses it
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split())
# irregular plurals the Porter stemmer does not fold onto their singular (suffix -> replacement)
_IRREGULAR = {"shelves": "shelf", "knives": "knife", "leaves": "leaf", "scarves": "scarf",
              "halves": "half", "loaves": "loaf", "wolves": "wolf", "calves": "calf",
              "hooves": "hoof", "thieves": "thief", "wives": "wife"}
_IRREGULAR_RE = re.compile(r"(" + "|".join(_IRREGULAR) + r")$")
_WORD = re.compile(r"[a-z0-9]+(?:['\u2019][a-z0-9]+)*(?:\.[0-9]+)*")
#: bump when tokenisation or weighting changes: it is part of every cached index's key
INDEX_VERSION = "bm25-lucene-porter-1"


def cache_root() -> Path:
    """Where arlgym caches built artifacts (``$ARLGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/arlgym``,
    else ``~/.cache/arlgym``)."""
    if os.environ.get("ARLGYM_CACHE_DIR"):
        return Path(os.environ["ARLGYM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "arlgym"


class Analyzer:
    """Text -> index terms: lower case, word split, possessive ``'s`` dropped, stop-words removed,
    irregular plurals folded, Porter-stemmed. Per-word results are memoised."""

    def __init__(self) -> None:
        try:
            import Stemmer
        except ImportError as e:
            raise MissingDependency("WebShop search needs PyStemmer (a C Snowball stemmer): "
                              "pip install 'arlgym[webshop]'") from e
        self._stem = Stemmer.Stemmer("porter").stemWord
        self._memo: dict[str, str | None] = {}

    def term(self, word: str) -> str | None:
        """The index term of one lower-case word (``None`` for a stop-word)."""
        out = self._memo.get(word, "")
        if out != "":
            return out
        w = word.replace("\u2019", "'")
        if w.endswith("'s"):
            w = w[:-2]
        w = w.replace("'", "")
        if not w or w in STOP_WORDS:
            out = None
        else:
            w = _IRREGULAR_RE.sub(lambda m: _IRREGULAR[m.group(1)], w)
            out = self._stem(w)
        if len(self._memo) < 500_000:  # bounded: agents type arbitrary words
            self._memo[word] = out
        return out

    def terms(self, text: str) -> list[str]:
        return [t for t in map(self.term, _WORD.findall(text.lower())) if t is not None]


def product_document(product: Any) -> str:
    """What WebShop indexes of a product: title, description, the first bullet point and the
    options as "name: v1, v2, and name2: …" (``search_engine/convert_product_file_format.py``)."""
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.name, product.description, first_bullet, options]).lower()


# ----------------------------------------------------------------------------- the index
class BM25:
    """Okapi BM25 (k1 = 0.9, b = 0.4: Lucene/pyserini's defaults) as CSC posting arrays.

    ``indptr[t]:indptr[t+1]`` are the postings of term ``t`` in ``docs`` (ascending document
    numbers) and ``weights`` (its BM25 contribution, ``idf · tf·(k1+1) / (tf + k1·(1-b+b·dl/avgdl))``,
    with Lucene's ``idf = ln(1 + (N - df + 0.5)/(df + 0.5))``).
    """

    def __init__(self, vocab: dict[str, int], indptr: np.ndarray, docs: np.ndarray,
                 weights: np.ndarray, n_docs: int, analyzer: Analyzer | None = None) -> None:
        self.vocab, self.indptr, self.docs, self.weights = vocab, indptr, docs, weights
        self.n_docs = int(n_docs)
        self.analyzer = analyzer or Analyzer()
        self._max_weight: np.ndarray | None = None
        self._scratch = threading.local()

    # -------------------------------------------------------------- build
    @classmethod
    def from_postings(cls, chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], n_docs: int,
                      vocab: dict[str, int], analyzer: Analyzer | None = None, k1: float = 0.9,
                      b: float = 0.4) -> BM25:
        """Build from chunks of ``(doc, term, tf)`` triples (each chunk's pairs distinct, its docs
        ascending and after the previous chunk's). ``vocab`` may still grow while the chunks are
        produced (a generator filling it in)."""
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        lengths = np.zeros(n_docs, dtype=np.float64)
        for doc, term, tf in chunks:
            order = np.lexsort((doc, term))  # by term, then doc: the chunk's slice of each posting list
            parts.append((doc[order].astype(np.int32), term[order].astype(np.int32),
                          np.minimum(tf[order], 65535).astype(np.uint16)))
            np.add.at(lengths, doc, tf)
        n_terms = len(vocab)
        df = np.zeros(n_terms, dtype=np.int64)
        for _, term, _ in parts:
            df += np.bincount(term, minlength=n_terms)
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        docs = np.empty(nnz, dtype=np.int32)
        tfs = np.empty(nnz, dtype=np.uint16)
        fill = indptr[:-1].copy()
        for doc, term, tf in parts:  # chunks in doc order: each posting list stays ascending
            counts = np.bincount(term, minlength=n_terms)
            starts = np.repeat(fill - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
            pos = starts + np.arange(len(term))
            docs[pos], tfs[pos] = doc, tf
            fill += counts
        del parts
        avgdl = float(lengths.mean()) if n_docs else 1.0
        idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
        norm = (k1 * (1 - b + b * lengths / max(avgdl, 1e-9))).astype(np.float32)
        weights = np.empty(nnz, dtype=np.float32)
        step = 1 << 22
        term_of = None
        for s in range(0, nnz, step):  # in slices: bounded scratch memory
            e = min(nnz, s + step)
            term_of = np.searchsorted(indptr, np.arange(s, e), side="right") - 1
            tf = tfs[s:e].astype(np.float32)
            weights[s:e] = idf[term_of].astype(np.float32) * tf * np.float32(k1 + 1) / (tf + norm[docs[s:e]])
        del term_of
        return cls(vocab, indptr, docs, weights, n_docs, analyzer)

    @classmethod
    def from_texts(cls, texts: Iterable[str], n_docs: int, analyzer: Analyzer | None = None,
                   chunk: int = 20_000) -> BM25:
        """Build from document texts (streamed: only ``chunk`` documents' terms at a time)."""
        analyzer = analyzer or Analyzer()
        vocab: dict[str, int] = {}

        def chunks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
            doc_l: list[int] = []
            term_l: list[int] = []
            tf_l: list[int] = []
            for i, text in enumerate(texts):
                for t, c in Counter(analyzer.terms(text)).items():
                    tid = vocab.get(t)
                    if tid is None:
                        tid = vocab[t] = len(vocab)
                    doc_l.append(i)
                    term_l.append(tid)
                    tf_l.append(c)
                if (i + 1) % chunk == 0:
                    yield np.array(doc_l, np.int64), np.array(term_l, np.int64), np.array(tf_l, np.int64)
                    doc_l, term_l, tf_l = [], [], []
            if doc_l:
                yield np.array(doc_l, np.int64), np.array(term_l, np.int64), np.array(tf_l, np.int64)

        return cls.from_postings(chunks(), n_docs, vocab, analyzer)

    # -------------------------------------------------------------- query
    def query_terms(self, query: str) -> list[int]:
        return [tid for t in self.analyzer.terms(query) if (tid := self.vocab.get(t)) is not None]

    @property
    def max_weight(self) -> np.ndarray:
        """Each term's largest posting weight (the MaxScore bound), computed on first use."""
        if self._max_weight is None:
            mw = np.zeros(len(self.indptr) - 1, dtype=np.float32)
            nonempty = np.flatnonzero(np.diff(self.indptr) > 0)
            if len(nonempty):
                mw[nonempty] = np.maximum.reduceat(np.asarray(self.weights), self.indptr[nonempty])
            self._max_weight = mw
        return self._max_weight

    def _postings(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = int(self.indptr[t]), int(self.indptr[t + 1])
        return self.docs[s:e], self.weights[s:e]

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> np.ndarray:
        """Document numbers of the ``k`` best matches (ties: lower number first); empty when no
        query term is in the index.

        Every posting of the query's terms is added into a per-thread dense score vector (float32,
        in term order, so a fresh and a cached index, and every instance, rank identically); the
        top k are then found by MaxScore among the documents of the query's rarest terms only:
        once the k-th best of those beats the summed bounds of the remaining terms, no other
        document can enter."""
        counts = Counter(self.query_terms(query))
        if not counts or k <= 0:
            return np.empty(0, dtype=np.int64)
        terms = sorted(counts)  # one clause per query word, as Lucene's BooleanQuery sums them
        mult = [counts[t] for t in terms]
        scores = getattr(self._scratch, "scores", None)
        if scores is None or len(scores) != self.n_docs:
            scores = self._scratch.scores = np.zeros(self.n_docs, dtype=np.float32)
        lists = [self._postings(t) for t in terms]
        try:
            for (docs, weights), m in zip(lists, mult, strict=True):
                scores[docs] += weights if m == 1 else weights * np.float32(m)
            bounds = self.max_weight[terms].astype(np.float64) * mult * (1 + 1e-6)  # float32 sums: slack
            by_bound = np.argsort(-bounds, kind="stable")
            rest = np.concatenate((np.cumsum(bounds[by_bound][::-1])[::-1], [0.0]))  # rest[j]: terms j..
            cand = lists[by_bound[0]][0]
            for j in range(len(terms)):
                if j:
                    merged = np.sort(np.concatenate((cand, lists[by_bound[j]][0])), kind="stable")
                    cand = merged[np.concatenate(([True], merged[1:] != merged[:-1]))]
                if len(cand) >= k and j + 1 < len(terms):
                    vals = scores[cand]
                    kth = np.partition(vals, len(vals) - k)[len(vals) - k]
                    if rest[j + 1] < kth:
                        break
            return self._top(cand, scores[cand], k)
        finally:
            if sum(len(d) for d, _ in lists) * 8 > self.n_docs:
                scores.fill(0.0)
            else:
                for docs, _ in lists:
                    scores[docs] = 0.0

    @staticmethod
    def _top(cand: np.ndarray, scores: np.ndarray, k: int) -> np.ndarray:
        if len(scores) > k:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            keep = np.flatnonzero(scores >= max(kth, 1e-300))
        else:
            keep = np.flatnonzero(scores > 0)
        order = np.lexsort((keep, -scores[keep]))[:k]  # score desc, then document number
        return cand[keep[order]].astype(np.int64)

    # -------------------------------------------------------------- disk
    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "indptr.npy", self.indptr)
        np.save(folder / "docs.npy", self.docs)
        np.save(folder / "weights.npy", self.weights)
        np.save(folder / "maxw.npy", self.max_weight)
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        (folder / "vocab.json").write_text(json.dumps({"n_docs": self.n_docs, "terms": terms}))

    @classmethod
    def load(cls, folder: Path, analyzer: Analyzer | None = None) -> BM25:
        meta = json.loads((folder / "vocab.json").read_text())
        vocab = {t: i for i, t in enumerate(meta["terms"])}
        # plain ndarray views of the memory maps (np.memmap's slicing is slow); ``.base`` is the map
        arrays = [np.asarray(np.load(folder / f"{n}.npy", mmap_mode="r")) for n in ("indptr", "docs", "weights")]
        index = cls(vocab, *arrays, n_docs=meta["n_docs"], analyzer=analyzer)
        index._max_weight = np.load(folder / "maxw.npy")
        return index


class ProductIndex:
    """A catalog's BM25 index answering with asins (``asins_of``: the catalog's vectorised
    number → asin, else ``asin_of`` one at a time)."""

    def __init__(self, bm25: BM25, asin_of: Callable[[int], str],
                 asins_of: Callable[[np.ndarray], list[str]] | None = None) -> None:
        self.bm25, self._asin_of, self._asins_of = bm25, asin_of, asins_of

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        found = self.bm25.search(query, k)
        if self._asins_of is not None:
            return self._asins_of(found)
        return [self._asin_of(int(i)) for i in found]


# ----------------------------------------------------------------------------- sharing
_SHARED: dict[str, ProductIndex] = {}
_SHARED_LOCK = threading.Lock()
_ANALYZER: Analyzer | None = None


def _analyzer() -> Analyzer:
    global _ANALYZER
    if _ANALYZER is None:
        _ANALYZER = Analyzer()
    return _ANALYZER


def build_bm25(catalog: Any, analyzer: Analyzer | None = None) -> BM25:
    """A fresh index of ``catalog`` (its own vectorised postings when it has them)."""
    analyzer = analyzer or _analyzer()
    n = len(catalog.products)
    postings = getattr(catalog, "postings", None)
    if postings is not None:
        vocab: dict[str, int] = {}
        return BM25.from_postings(postings(analyzer, vocab), n, vocab, analyzer)
    return BM25.from_texts((product_document(p) for p in catalog.iter_products()), n, analyzer)


def shared_index(catalog: Any, use_disk: bool = True) -> ProductIndex:
    """The index of ``catalog``: one per catalog fingerprint in this process, memory-mapped from
    the disk cache when another process already built it (see the module docstring)."""
    key = f"{catalog.fingerprint}-{INDEX_VERSION}"
    with _SHARED_LOCK:
        if key in _SHARED:
            return _SHARED[key]
        folder = cache_root() / "webshop" / key
        bm25, damaged = None, False
        if use_disk and (folder / "vocab.json").is_file():
            try:
                bm25 = BM25.load(folder, _analyzer())
            except (OSError, ValueError, KeyError):
                damaged = True  # rebuild it below
        if bm25 is None:
            bm25 = build_bm25(catalog)
            if use_disk:
                _store(bm25, folder, replace=damaged)
        _SHARED[key] = index = ProductIndex(bm25, catalog.asin_of, getattr(catalog, "asins_of", None))
        return index


def _store(bm25: BM25, folder: Path, replace: bool = False) -> None:
    """Write atomically: into a temporary sibling, then rename. A copy another process stored
    meanwhile is kept (``replace``: a damaged one is not)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
        bm25.save(tmp)
        if replace and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:  # it exists: another process stored it first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass  # a read-only home: the index still works, only not cached


def _clear_shared() -> None:
    """Forget the in-process indexes (tests)."""
    with _SHARED_LOCK:
        _SHARED.clear()
