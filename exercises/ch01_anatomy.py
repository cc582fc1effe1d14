# Exercise stub, generated from the course's key (solutions/ch01_anatomy.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 1 exercises: the shapes of a LLaMA model, by hand.

Read Chapter 1 ("A decoder-only Transformer, from the top") first. Both functions are pure
integer arithmetic: no tensors, no model. Check yourself with

    python -m llama_course.grade exercises/
"""

from llama_course.config import LlamaConfig


def ffn_hidden_dim(d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """Hidden width of LLaMA's SwiGLU feed-forward layer (Meta's rule).

    1. Start from the classic Transformer's 4 * d_model and take two thirds of it
       (SwiGLU has three matrices instead of two); truncate to an int.
    2. If ffn_dim_multiplier is given, multiply by it and truncate to an int again.
    3. Round *up* to the next multiple of multiple_of.

    Examples: ffn_hidden_dim(4096) == 11008; ffn_hidden_dim(8192, 4096, 1.3) == 28672.
    """
    raise NotImplementedError(
        'Exercise 1.1 ffn_hidden_dim (Chapter 1, section 1.5 "Anatomy of LLaMA-2 7B")'
        ': not implemented yet'
    )


def count_parameters(config: LlamaConfig) -> dict:
    """Count the parameters of the model that ``config`` describes, part by part.

    Return a dict with these keys (attention, ffn, router and norms are PER BLOCK):

        embedding    the token embedding matrix (vocab_size x d_model)
        attention    W_Q, W_K, W_V, W_O of one block; with grouped-query attention W_K and W_V
                     have only n_kv_heads * head_dim rows
        ffn          the SwiGLU matrices W_gate, W_up, W_down of one block, times n_experts
        router       the Mixture-of-Experts gate (d_model x n_experts), 0 for a dense model
        norms        the two RMSNorm weight vectors of one block
        per_block    attention + ffn + router + norms
        blocks       n_layers * per_block
        final_norm   the RMSNorm before the vocabulary head
        lm_head      the vocabulary head (d_model x vocab_size), 0 when tie_embeddings is True
        total        every parameter of the model
        active       parameters one token uses: only n_experts_per_token of the experts run

    LLaMA has no biases. Use config.head_dim and config.d_ff.
    """
    raise NotImplementedError(
        'Exercise 1.2 count_parameters (Chapter 1, section 1.6 "Counting parameters")'
        ': not implemented yet'
    )
# generated stub, sha256 a56b4d1db606824110473ae938f2b0ba7dc01d1706e96259780e68b7b793973b
