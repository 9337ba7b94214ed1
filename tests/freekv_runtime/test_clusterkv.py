"""ClusterKV's defining rule on tiny tensors: prompt keys in four well-separated directions are clustered
by cosine k-means (sjtu-zhao-lab/ClusterKV accuracy/cluster_attention.py 34-60), and at a decode step the
clusters are taken best first by the query's inner product with their centroids (the group's queries
averaged: gqa_policy qavg), their tokens in position order, until the selection budget is full (108-155,
"truc"); attention is over sink + selected + window. The reference below is written out independently."""

from __future__ import annotations

import math

import torch
from test_policy_conformance import SHAPE, Episode, make_episode, run_policy

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies.clusterkv import cosine_kmeans

T, SINK, WINDOW, BUDGET, N_CLUSTERS = 60, 4, 4, 24, 4


def _episode(seed: int) -> tuple[Episode, torch.Tensor]:
    """A random episode whose prompt keys after the sink point in one of four directions each."""
    episode = make_episode(SHAPE, T, 2, seed)
    g = torch.Generator().manual_seed(seed)
    hkv, d, n = SHAPE.n_kv_heads, SHAPE.head_dim, T - SINK
    cluster = torch.randint(0, N_CLUSTERS, (hkv, n), generator=g)
    for c in range(N_CLUSTERS):  # the k-means start rows (evenly spaced) fall in distinct clusters
        cluster[:, (c * n) // N_CLUSTERS] = c
    for _q, k, _v in episode.prompt:
        dirs = torch.nn.functional.normalize(torch.randn(hkv, N_CLUSTERS, d, generator=g), dim=-1) * 4
        noise = 0.1 * torch.randn(hkv, n, d, generator=g)
        k[:, SINK:] = dirs.gather(1, cluster[..., None].expand(-1, -1, d)) + noise
    return episode, cluster


def test_kmeans_recovers_separated_clusters() -> None:
    episode, cluster = _episode(0)
    _, assign = cosine_kmeans(episode.prompt[1][1][:, SINK:], N_CLUSTERS, 20)
    for h in range(SHAPE.n_kv_heads):  # the same partition (labels may be permuted)
        pairs = set(zip(cluster[h].tolist(), assign[h].tolist(), strict=True))
        assert len(pairs) == N_CLUSTERS


def test_the_best_clusters_are_attended() -> None:
    episode, cluster = _episode(1)
    config = RuntimeConfig(method="clusterkv", page_size=1, budget_tokens=BUDGET, sink_tokens=SINK,
                           window_tokens=WINDOW, dense_layers=(0,), knobs={"clusters": N_CLUSTERS})
    run = run_policy(config, [episode])
    group = SHAPE.n_qo_heads // SHAPE.n_kv_heads
    for layer in (1, 2):
        _, k, v = (x.double() for x in episode.prompt[layer])
        q_t, k_t, v_t = (x.double() for x in episode.steps[0][layer])
        k, v = torch.cat([k, k_t], 1), torch.cat([v, v_t], 1)
        n = k.shape[1]
        for h in range(SHAPE.n_kv_heads):
            heads = slice(h * group, (h + 1) * group)
            centroids = torch.stack([k[h, SINK:T][cluster[h] == c].mean(0) for c in range(N_CLUSTERS)])
            order = (q_t[heads, 0] @ centroids.T).mean(0).argsort(descending=True)
            candidates = torch.arange(SINK, n - WINDOW)
            chosen = torch.cat([candidates[cluster[h][candidates - SINK] == c] for c in order])
            chosen = chosen[: BUDGET - SINK - WINDOW]
            idx = torch.cat([torch.arange(SINK), chosen.sort().values, torch.arange(n - WINDOW, n)])
            w = torch.softmax(q_t[heads, 0] @ k[h, idx].T / math.sqrt(k.shape[-1]), -1)
            torch.testing.assert_close(run.decode_out[0][layer][0, heads, 0].double(), w @ v[h, idx],
                                       atol=1e-5, rtol=0)
            assert run.steps[0].attended_tokens[0, layer, h] == BUDGET
