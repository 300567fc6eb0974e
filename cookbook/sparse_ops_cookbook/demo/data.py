"""Deterministic demo data: a click log with the structure of real ones, and graphs.

The click log has ``n_fields`` categorical fields (one value each, like Criteo's C1..C26)
plus one multi-valued field (a bag of 0..``max_tags`` ids, like a user's interests). Each
field owns a block of the feature ids; the vocabularies range from tens to hundreds of
thousands of values and values are drawn from a Zipf law within each field, so a few ids
are everywhere and most are seen once or never (the long tail that makes embedding
gradients sparse). Labels come from a hidden factorization machine plus noise, with a
click rate near 20%, so a model that learns the frequent features' weights and
interactions reaches a test AUC well above chance, and the rare ones stay unlearnable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


ZIPF_EXPONENTS = (1.05, 1.4)  # range of the fields' Zipf exponents (larger: more mass on the head)
WEIGHT_SCALE = 0.7  # a field's hidden weights have the scale WEIGHT_SCALE / log10(vocabulary + 10)
FACTOR_SCALE = 0.25  # scale of the hidden factors (the pairwise term)


@dataclass
class ClickLog:
    """A click log split in train and test: csr parts (int32 indices, float32 ones) per split."""

    n_features: int
    train: tuple  # (indptr, indices, data, labels)
    test: tuple
    field_sizes: np.ndarray  # vocabulary size of each field (the last one is the multi-valued field)
    bayes_auc: float  # test AUC of the hidden model's logits (with their noise): out of any model's reach

    @property
    def n_train(self) -> int:
        return len(self.train[3])

    @property
    def n_test(self) -> int:
        return len(self.test[3])

    @property
    def click_rate(self) -> float:
        return float(np.mean(self.train[3]))


def _field_sizes(rng: np.random.Generator, n_features: int, n_fields: int) -> np.ndarray:
    """Vocabulary sizes log-uniform between ~10 and ~n_features/4, summing to n_features."""
    raw = np.exp(rng.uniform(np.log(10), np.log(max(n_features / 4, 20)), n_fields))
    sizes = np.maximum(np.floor(raw / raw.sum() * n_features), 2).astype(np.int64)
    sizes[np.argmax(sizes)] += n_features - sizes.sum()  # exact total
    return sizes


def _zipf_ids(rng: np.random.Generator, size: int, ids: np.ndarray, exponent: float) -> np.ndarray:
    """``size`` draws from a Zipf law over the values ``ids`` (most frequent first):
    P(rank r) ~ r^-exponent, by the continuous power law's inverse CDF, floored (O(1) a draw)."""
    vocab, a = len(ids), 1.0 - exponent
    ranks = ((vocab + 1.0) ** a - 1.0) * rng.random(size) + 1.0
    ranks = np.minimum(ranks ** (1.0 / a), vocab).astype(np.int64) - 1
    return ids[np.maximum(ranks, 0)]


def make_click_log(n_examples: int = 300_000, n_features: int = 1 << 20, n_fields: int = 26,
                   max_tags: int = 10, test_fraction: float = 0.2, rank: int = 4,
                   seed: int = 0) -> ClickLog:
    """Generate the click log (about ``n_fields + max_tags / 2`` active features a row).

    Row i holds one id per field, in field order (field blocks are laid out in increasing
    id order, so rows come out sorted), then its distinct tag ids. Labels:
    y ~ Bernoulli(sigmoid(b + sum_j w_j + sum_{j<l} <v_j, v_l> + noise)). The "world"
    (fields, value popularity, hidden weights) depends on ``seed`` only, not on
    ``n_examples``: a smaller log is a sample of the same world.
    """
    world, draw = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    sizes = _field_sizes(world, n_features, n_fields + 1)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    exponents = world.uniform(*ZIPF_EXPONENTS, n_fields + 1)
    # each field's values by popularity: a random order, so the most frequent is not id 0
    popular = [off + world.permutation(size) for off, size in zip(offsets, sizes)]
    # the hidden model: weights heavier for the fields with small vocabularies (as "device
    # type" matters more per value than "user id"), interactions of rank `rank`
    field_of = np.repeat(np.arange(n_fields + 1), sizes)
    w = world.standard_normal(n_features) * (WEIGHT_SCALE / np.log10(sizes + 10))[field_of]
    v = world.standard_normal((n_features, rank)) * (FACTOR_SCALE / np.sqrt(rank))

    fields = np.empty((n_examples, n_fields), dtype=np.int64)
    for f in range(n_fields):
        fields[:, f] = _zipf_ids(draw, n_examples, popular[f], exponents[f])
    # the multi-valued field: Poisson-many draws, sorted, repeats and overflow masked out
    counts = np.minimum(draw.poisson(max_tags / 2, n_examples), max_tags)
    tags = np.sort(_zipf_ids(draw, n_examples * max_tags, popular[-1], exponents[-1]).reshape(n_examples, max_tags),
                   axis=1)
    keep = np.arange(max_tags)[None, :] < counts[:, None]
    keep[:, 1:] &= tags[:, 1:] != tags[:, :-1]  # sorted: a repeat sits right after its first copy
    ids = np.concatenate([fields, tags], axis=1)
    mask = np.concatenate([np.ones_like(fields, dtype=bool), keep], axis=1)
    indices = ids[mask].astype(np.int32)
    indptr = np.zeros(n_examples + 1, dtype=np.int32)
    np.cumsum(mask.sum(axis=1), out=indptr[1:])

    x = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n_examples, n_features))
    linear = x @ w
    s = x @ v
    pair = 0.5 * ((s * s).sum(axis=1) - x @ (v * v).sum(axis=1))
    logit = linear + pair + 0.35 * draw.standard_normal(n_examples)
    logit += _bias_for_rate(logit, 0.2)
    labels = (draw.random(n_examples) < _sigmoid(logit)).astype(np.float32)

    n_test = int(round(n_examples * test_fraction))
    cut = n_examples - n_test
    data = np.ones(len(indices), dtype=np.float32)
    train = (indptr[:cut + 1].copy(), indices[:indptr[cut]], data[:indptr[cut]], labels[:cut])
    test = (indptr[cut:] - indptr[cut], indices[indptr[cut]:], data[indptr[cut]:], labels[cut:])
    return ClickLog(n_features, train, test, sizes, auc(logit[cut:], labels[cut:]))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for any z


def _bias_for_rate(logit: np.ndarray, rate: float) -> float:
    """The shift b with mean(sigmoid(logit + b)) = rate (bisection)."""
    lo, hi = -20.0, 20.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if np.mean(_sigmoid(logit + mid)) > rate:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve by the rank formula (Mann-Whitney U), ties averaged:
    (sum of the positives' ranks - P (P + 1) / 2) / (P N)."""
    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(labels) > 0.5
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # ranks 1..n, each run of equal scores sharing its mean rank
    starts = np.flatnonzero(np.concatenate([[True], sorted_scores[1:] != sorted_scores[:-1]]))
    ends = np.concatenate([starts[1:], [len(scores)]])
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


# ---- graphs ------------------------------------------------------------------------------------------
@dataclass
class Graph:
    """An undirected graph for node classification: symmetric csr adjacency parts, node
    features, labels and the labelled (training) nodes."""

    name: str
    adjacency: tuple  # (indptr, indices, data), float32 ones, no self loops
    features: np.ndarray  # (n, d) float32
    labels: np.ndarray  # (n,) int64
    train_nodes: np.ndarray  # indices of the labelled nodes
    target: float  # the test accuracy the demo promises on this graph

    @property
    def n_nodes(self) -> int:
        return len(self.labels)

    @property
    def n_classes(self) -> int:
        return int(self.labels.max()) + 1

    @property
    def n_edges(self) -> int:
        return len(self.adjacency[1]) // 2


def _csr_from_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple:
    """Symmetric csr parts (indices sorted, unique per row) from undirected edges."""
    keys = np.unique(np.concatenate([src * n + dst, dst * n + src]))
    keys = keys[keys // n != keys % n]  # no self loops: gcn_norm adds them
    rows, cols = keys // n, keys % n
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols.astype(np.int32), np.ones(len(cols), dtype=np.float32)


def karate_club() -> Graph | None:
    """Zachary's karate club (networkx), 2 factions; one-hot node ids as features and
    two labelled nodes per faction (the two leaders among them). None without networkx."""
    try:
        import networkx as nx
    except ImportError:
        return None
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    edges = np.array(list(g.edges()), dtype=np.int64)
    labels = np.array([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(n)], dtype=np.int64)
    train = np.array([0, 1, 32, 33])  # Mr. Hi, a follower; the Officer, a follower
    return Graph("karate club (networkx)", _csr_from_edges(n, edges[:, 0], edges[:, 1]),
                 np.eye(n, dtype=np.float32), labels, train, 0.85)


def stochastic_block_model(blocks: int = 3, size: int = 100, p_in: float = 0.08, p_out: float = 0.008,
                           n_features: int = 16, labelled: int = 5, seed: int = 0) -> Graph:
    """A stochastic block model: ``blocks`` communities of ``size`` nodes, edges with
    probability ``p_in`` inside a community and ``p_out`` across; node features are weak,
    noisy hints of the community (alone they classify poorly; the graph fixes that);
    ``labelled`` nodes per community are labelled."""
    rng = np.random.default_rng(seed)
    n = blocks * size
    labels = np.repeat(np.arange(blocks), size)
    upper = np.triu(rng.random((n, n)) < np.where(labels[:, None] == labels[None, :], p_in, p_out), k=1)
    src, dst = np.nonzero(upper)
    centres = rng.standard_normal((blocks, n_features))
    features = (0.35 * centres[labels] + rng.standard_normal((n, n_features))).astype(np.float32)
    train = np.concatenate([rng.choice(np.flatnonzero(labels == b), labelled, replace=False) for b in range(blocks)])
    return Graph(f"stochastic block model ({blocks} x {size} nodes)", _csr_from_edges(n, src, dst),
                 features, labels, np.sort(train), 0.9)
