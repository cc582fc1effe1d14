# Exercise stub, generated from the course's key (solutions/ch13_parallel.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 13 exercises: memory, communication and splitting matrices across GPUs.

Read Chapter 13 ("Beyond one GPU") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 13
"""

import torch
import torch.nn.functional as F

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")


def memory_per_gpu(n_params, n_gpus: int, strategy: str = "ddp", mixed_precision: bool = True) -> float:
    """Bytes of weights, gradients and AdamW state on each of n_gpus GPUs while training.

    Per parameter: weights and gradients 2 bytes each with mixed precision (4 without), AdamW's m
    and v 4 bytes each, and a float32 master copy (4) with mixed precision only. "ddp" splits
    nothing, "zero1" splits the optimizer state (master, m, v) n_gpus ways, "zero2" the gradients
    too, "zero3" the weights too. Raise ValueError naming strategy or n_gpus when they are not valid."""
    raise NotImplementedError(
        'Exercise 13.1 memory_per_gpu (Chapter 13, section 13.1 "Memory per parameter")'
        ': not implemented yet'
    )


def communication_bytes(n_params, n_gpus: int, strategy: str = "ddp", bytes_per_value: int = 2) -> float:
    """Bytes each rank sends per optimizer step with ring collectives: an all-reduce of P values
    sends 2 (N-1)/N P values, a reduce-scatter or an all-gather (N-1)/N P. "ddp", "zero1" and
    "zero2" move as much as one all-reduce of the gradients; "zero3" all-gathers the weights for
    the forward pass and again for the backward pass, and reduce-scatters the gradients."""
    raise NotImplementedError(
        'Exercise 13.2 communication_bytes (Chapter 13, section 13.2 "What travels between the GPUs")'
        ': not implemented yet'
    )


def tensor_parallel_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
                           n: int) -> list:
    """SwiGLU down(SiLU(x gate^T) * (x up^T)) as n ranks compute it: rank r holds rows
    r*d_ff/n .. (r+1)*d_ff/n - 1 of w_gate and w_up (column-parallel) and the same columns of
    w_down (row-parallel). Return the list of the n partial outputs, each (..., d_model), whose sum
    (the all-reduce) is the SwiGLU output. Rank r's partial must use only rank r's slices.
    Raise ValueError naming n if n does not divide d_ff."""
    raise NotImplementedError(
        'Exercise 13.3 tensor_parallel_swiglu (Chapter 13, section 13.4 "Tensor parallel")'
        ': not implemented yet'
    )


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------


def pipeline_bubble_fraction(n_stages: int, n_microbatches: int) -> float:
    """Pipeline parallelism (GPipe schedule): the model's layers are cut into n_stages consecutive
    stages, one per GPU, and a batch into n_microbatches. Every micro-batch passes through the
    stages in order (forward), then back in reverse order (backward); each stage handles one
    micro-batch at a time, a forward takes one time slot and a backward two, every forward comes
    before any backward (GPipe's flush), and each step starts as soon as it can. Return the
    fraction of the GPUs' time slots, from the first forward to the last backward, in which a GPU
    is idle. Raise ValueError naming the argument for a count below 1.

    Example: 3 stages, 4 micro-batches. The forwards end after 6 slots and the backwards after 12
    more, so the step lasts 18 slots; each GPU is busy 4 * (1 + 2) = 12 of them and idle 6, and the
    fraction is 3 * 6 / (3 * 18) = 1/3."""
    raise NotImplementedError(
        'Homework 13.A pipeline_bubble_fraction (Chapter 13, beyond section 13.7 "Pipeline parallel")'
        ': not implemented yet'
    )


def all_to_all_counts(expert_ids: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Expert parallelism: expert_ids (R, N, k) holds, for each of R ranks, the k experts each of
    its N tokens is routed to. The n_experts experts are spread evenly over the R ranks, rank j
    holding experts j*E/R .. (j+1)*E/R - 1. Return the (R, R) int64 matrix of the all-to-all:
    entry [i, j] is how many (token, expert) pairs rank i sends to rank j. Pairs whose expert lives
    on the token's own rank count as sent to itself, on the diagonal [i, i], although they never
    cross the network. Raise ValueError naming n_experts if R does not divide it or an id is
    outside [0, n_experts).

    Example: R = 2 ranks, 4 experts (rank 0 holds 0-1, rank 1 holds 2-3), 2 tokens per rank, k = 2:
    expert_ids = [[[0, 3], [1, 2]], [[1, 2], [3, 2]]] gives [[2, 2], [1, 3]]: rank 0 keeps 2 pairs
    (experts 0 and 1) and sends 2 to rank 1; rank 1 sends 1 to rank 0 (expert 1) and keeps 3."""
    raise NotImplementedError(
        'Homework 13.B all_to_all_counts (Chapter 13, beyond section 13.6 "Expert parallel")'
        ': not implemented yet'
    )
# generated stub, sha256 f9ab3adc8d9d711bd68c9ebcb768735ef54f611507ef00d0d1eed533a388b93f
