"""Homework 12.B ("differentiable in scores") answered with the right value but no gradient: the
loss is computed in Python numbers and wrapped in a fresh tensor, cut off from the scores."""

import torch


def sequence_balance_loss(scores, experts, n_experts, alpha):
    T, K = experts.shape
    counts = [0] * n_experts
    for e in experts.reshape(-1).tolist():
        counts[e] += 1
    s = scores.double().tolist()
    total = sum(n_experts / (K * T) * counts[i] * sum(s[t][i] / sum(s[t]) for t in range(T)) / T
                for i in range(n_experts))
    return torch.tensor(alpha * total, dtype=torch.float32)
