"""The names code has always imported from here; the decoder itself is models/decoder.py and the
Llama architecture's readers are models/arch/llama.py."""

from sgrun.models.decoder import (EAGER_BLOCKS, DecoderModel, LayerBlocks, LayerWeights, LlamaModel,  # noqa: F401
                                  MoEWeights, attention_inputs, first_block, inner_block, layer_tail,
                                  rope_inv_freq, rotate_half)
