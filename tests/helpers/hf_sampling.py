"""The sampler's oracle: HF transformers' greedy generation and full-forward log-probs on tiny random models."""

import torch

PROMPT_LENS = (3, 11, 7, 20)
NEW = 12


SIZES = dict(  # the tiny HF models of these tests
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.3,
    tie_word_embeddings=False,
)


def hf_greedy(hf, prompts, new):
    """HF generate's greedy continuation of `new` tokens per prompt (left-padded batch, no stop token)."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    out = hf.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    return out[:, width:].tolist()


def hf_logprobs(hf, seq):
    """[len(seq), vocab] float64 log-softmax of HF's full forward over `seq`."""
    with torch.no_grad():
        logits = hf(torch.tensor([seq])).logits[0].double()
    return torch.log_softmax(logits, -1).numpy()
