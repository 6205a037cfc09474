"""Tiny random models for tests: built from a config, with a tokenizer made locally (no downloads)."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Text the tokenizer's merges are learned from: enough to give prompts a realistic length.
CORPUS = [
    "Question: Tom has 12 apples and buys 7 more. How many apples does Tom have?",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>',
    "Write one calculator call whose result answers the question. Answer: 19",
    "Check the calculator result and give the final answer as a number. Calculator: 6*4 = 24",
    "def add(a, b):\n    return a + b\nassert add(1, 2) == 3\nSELECT name FROM users WHERE id = 1;",
    "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) [ ] { } , . : ; ' \" \n",
] * 4


def tiny_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in milliseconds on a fixed corpus (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token="<|im_start|>"
    )
    fast.chat_template = CHATML
    return fast


TINY_CONFIGS = {
    "tiny-llama": lambda vocab: LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
    "tiny-qwen2": lambda vocab: Qwen2Config(
        vocab_size=vocab,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    ),
}
TINY_VOCAB = {"tiny-llama": 400, "tiny-qwen2": 330}


def tiny_model(alias: str, seed: int = 0) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    tokenizer = tiny_tokenizer(TINY_VOCAB[alias])
    config = TINY_CONFIGS[alias](len(tokenizer))
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
