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
    # BEGIN SOLUTION Exercise 1.1 ffn_hidden_dim (Chapter 1, section 1.5 "Anatomy of LLaMA-2 7B")
    hidden = int(2 * 4 * d_model / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    remainder = hidden % multiple_of
    if remainder:
        hidden += multiple_of - remainder
    return hidden
    # END SOLUTION


def count_parameters(config: LlamaConfig) -> dict:
    """Count the parameters of the model that ``config`` describes, part by part.

    Return a dict with these keys (attention, ffn, router and norms are PER BLOCK):

        embedding    the token embedding matrix (vocab_size x d_model)
        attention    W_Q, W_K, W_V, W_O of one block; with grouped-query attention W_K and W_V
                     have only n_kv_heads * head_dim rows
        ffn          the SwiGLU matrices W_gate, W_up, W_down of one block, times n_experts
        router       the Mixture-of-Experts gate (d_model x n_experts), 0 for a dense model
        norms        the two RMSNorm weight vectors of one block (d_model each); with config.qk_norm
                     (Qwen3) also the query and key RMSNorms, head_dim each: 2 * d_model + 2 * head_dim
        per_block    attention + ffn + router + norms
        blocks       n_layers * per_block
        final_norm   the RMSNorm before the vocabulary head
        lm_head      the vocabulary head (d_model x vocab_size), 0 when tie_embeddings is True
        total        every parameter of the model
        active       parameters one token uses: total minus the experts it does not run, i.e.
                     n_layers * (n_experts - n_experts_per_token) * (one expert's 3 matrices). It
                     counts the embedding, the vocabulary head, the router and the norms; for a
                     dense model active == total

    Every value is a Python int. LLaMA has no biases. Use config.head_dim and config.d_ff.
    """
    # BEGIN SOLUTION Exercise 1.2 count_parameters (Chapter 1, section 1.6 "Counting parameters")
    d = config.d_model
    q_width = config.n_heads * config.head_dim
    kv_width = config.n_kv_heads * config.head_dim
    one_expert = 3 * d * config.d_ff

    embedding = config.vocab_size * d
    attention = d * q_width + d * kv_width + d * kv_width + q_width * d
    ffn = config.n_experts * one_expert
    router = d * config.n_experts if config.n_experts > 1 else 0
    norms = 2 * d + (2 * config.head_dim if config.qk_norm else 0)
    per_block = attention + ffn + router + norms
    lm_head = 0 if config.tie_embeddings else config.vocab_size * d
    total = embedding + config.n_layers * per_block + d + lm_head
    unused_experts = config.n_experts - config.n_experts_per_token
    return {
        "embedding": embedding,
        "attention": attention,
        "ffn": ffn,
        "router": router,
        "norms": norms,
        "per_block": per_block,
        "blocks": config.n_layers * per_block,
        "final_norm": d,
        "lm_head": lm_head,
        "total": total,
        "active": total - config.n_layers * unused_experts * one_expert,
    }
    # END SOLUTION
