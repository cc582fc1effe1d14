"""What data parallel training costs per device (Chapter 13), before any
activation: ZeRO's memory arithmetic and ring collectives' traffic.

    memory per parameter     ZeRO (Rajbhandari et al. 2020), mixed
                             precision with AdamW:
                             2 (bf16 weights) + 2 (bf16 gradients)
                             + 12 (fp32 master, m, v) = 16 bytes
                             DDP 16 | ZeRO-1 4 + 12/N | ZeRO-2 2 + 14/N
                             | ZeRO-3 16/N
    communication per step   ring all-reduce sends 2 (N-1)/N * P values
                             per rank; reduce-scatter and all-gather
                             (N-1)/N * P each. DDP, ZeRO-1/2: 2 (N-1)/N P;
                             ZeRO-3 (FSDP): 3 (N-1)/N P (weights gathered
                             for forward and backward)
"""

from __future__ import annotations

from ..checks import check_bool, check_one_of, check_positive_int

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")


def training_bytes_per_parameter(mixed_precision: bool = True
                                 ) -> dict[str, int]:
    """Bytes each parameter needs while training with AdamW, before any
    activation.

        mixed precision   weights 2 (bf16) + gradients 2 (bf16)
                          + master copy 4 + m 4 + v 4 = 16
        float32           weights 4 + gradients 4 + m 4 + v 4 = 16
                          (no master copy)
    """
    check_bool("mixed_precision", mixed_precision)
    low = 2 if mixed_precision else 4
    parts = {"weights": low, "gradients": low,
             "master": 4 if mixed_precision else 0,
             "adam_m": 4, "adam_v": 4}
    parts["total"] = sum(parts.values())
    return parts


def _check_strategy(strategy, n_gpus) -> None:
    check_one_of("strategy", strategy, STRATEGIES)
    check_positive_int("n_gpus", n_gpus)


def memory_per_gpu(n_params: int, n_gpus: int, strategy: str = "ddp",
                   mixed_precision: bool = True) -> float:
    """Bytes of weights, gradients and optimizer state on each of
    ``n_gpus`` (ZeRO's Figure 1).

        ddp    (w + g + o) P          nothing is split
        zero1  (w + g + o / N) P      optimizer state split
        zero2  (w + (g + o) / N) P    gradients too
        zero3  (w + g + o) P / N      weights too (FSDP)
    """
    _check_strategy(strategy, n_gpus)
    b = training_bytes_per_parameter(mixed_precision)
    w, g = b["weights"], b["gradients"]
    o = b["master"] + b["adam_m"] + b["adam_v"]
    n = n_gpus
    per_param = {"ddp": w + g + o, "zero1": w + g + o / n,
                 "zero2": w + (g + o) / n, "zero3": (w + g + o) / n}
    return per_param[strategy] * n_params


def communication_bytes(n_params: int, n_gpus: int, strategy: str = "ddp",
                        bytes_per_value: int = 2) -> float:
    """Bytes each rank sends per optimizer step with ring collectives (the
    same amount arrives).

        all-reduce of P values    2 (N-1)/N P   = reduce-scatter + all-gather
        ddp, zero1, zero2         2 (N-1)/N P   (ZeRO-2 reduce-scatters the
                                                gradients and all-gathers
                                                the updated weights)
        zero3 (FSDP)              3 (N-1)/N P   all-gather for forward,
                                                again for backward,
                                                reduce-scatter of gradients
    """
    _check_strategy(strategy, n_gpus)
    share = (n_gpus - 1) / n_gpus
    passes = 3 if strategy == "zero3" else 2
    return passes * share * n_params * bytes_per_value
