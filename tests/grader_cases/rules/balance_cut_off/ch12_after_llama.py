"""Homework 12.B ("differentiable in scores") answered with the right value but no gradient: the
loss is computed with torch and then cut off from the scores (.detach())."""

import torch


def sequence_balance_loss(scores, experts, n_experts, alpha):
    T, K = experts.shape
    counts = torch.zeros(n_experts).index_add(0, experts.reshape(-1), torch.ones(T * K))
    f = n_experts / (K * T) * counts                                  # (E,)
    s = scores.float()
    p = (s / s.sum(dim=-1, keepdim=True)).mean(dim=0)                 # (E,)
    return (alpha * (f * p).sum()).detach()
