"""Tiny random Hugging Face models of every architecture gpubox-modeld runs,
made with transformers itself (no weights can be downloaded): a config, random
weights (norms included, so that a wrong norm form shows), save_pretrained."""
import os

import torch
import transformers as tf

COMMON = dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, vocab_size=320, bos_token_id=1, eos_token_id=2)


def configs():
    """name -> (model class, config): each exercises its architecture's differences."""
    return {
        "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=320, n_positions=128,
                                                   bos_token_id=1, eos_token_id=2)),
        "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(**COMMON, max_position_embeddings=256, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32})),
        "llama2": (tf.LlamaForCausalLM, tf.LlamaConfig(**dict(COMMON, num_key_value_heads=4), max_position_embeddings=256)),
        "mistral": (tf.MistralForCausalLM, tf.MistralConfig(**COMMON, sliding_window=5, max_position_embeddings=256)),
        "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config(**COMMON, tie_word_embeddings=True, max_position_embeddings=256)),
        "gemma2": (tf.Gemma2ForCausalLM, tf.Gemma2Config(**dict(COMMON, bos_token_id=2, eos_token_id=1), head_dim=16,
                                                          sliding_window=5, max_position_embeddings=256,
                                                          query_pre_attn_scalar=16, attn_logit_softcapping=2.0,
                                                          final_logit_softcapping=3.0)),
        # Gemma 3 text: q/k norms, a global layer between sliding ones, and a RoPE per layer type
        # (linear scaling on the global one only, as Gemma 3's larger models have it).
        "gemma3": (tf.Gemma3ForCausalLM, tf.Gemma3TextConfig(
            **dict(COMMON, bos_token_id=2, eos_token_id=1), head_dim=16, sliding_window=5, max_position_embeddings=256,
            query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    }


def randomize(model, seed):
    """Random weights everywhere, norms included (their initial ones/zeros would hide a wrong norm)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            scale = 0.2 if parameter.dim() == 1 else 0.08
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale
                            + (1.0 if parameter.dim() == 1 and "norm" in name.lower() or name.endswith("ln_1.weight")
                               or name.endswith("ln_2.weight") or name.endswith("ln_f.weight") else 0.0))
    return model


def make(directory, name, seed=0):
    """Saves model `name` under directory/name; returns (path, model in eval mode, float32)."""
    cls, config = configs()[name]
    model = randomize(cls(config), seed).eval()
    path = os.path.join(directory, name)
    model.save_pretrained(path)
    return path, model
