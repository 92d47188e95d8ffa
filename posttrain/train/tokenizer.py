"""Build a byte-level BPE tokenizer locally with HF `tokenizers` and wrap it as a standard
`PreTrainedTokenizerFast` with a chat template, so it saves as `tokenizer.json` and loads
back with `AutoTokenizer.from_pretrained` like any hub tokenizer.

The chat template is ChatML; assistant turns are wrapped in `{% generation %}` so
`apply_chat_template(..., return_assistant_tokens_mask=True)` marks exactly the tokens
the model must learn (the reply and its closing `<|im_end|>`).
"""

from __future__ import annotations

from typing import Iterable

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """Train byte-level BPE on `texts`; returns a `PreTrainedTokenizerFast` (eos = <|im_end|>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=PAD,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[IM_START],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
