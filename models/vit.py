"""A Vision Transformer (Dosovitskiy et al. 2021), small enough to train from scratch here.

Patch embedding (a Conv2D with kernel = stride = `patch_size`, plus learned position
embeddings), `depth` pre-norm encoder blocks of multi-head self-attention and an MLP, a
final LayerNorm, the mean over tokens (no class token: equivalent accuracy for small
models, one less special case), Dropout and a Dense head with a float32 softmax.

Under mixed precision the matrix products run in float16/bfloat16, but what loses range
or precision there computes in float32:
- the attention softmax (`SelfAttention` computes the scores' softmax in a float32
  `Softmax` and casts the weights back): exponentials summed over every token in 11 (or 8)
  bits of mantissa lose the small weights;
- every LayerNormalization (`dtype="float32"`): a variance of float16 activations
  overflows or underflows.
The mixed-precision lint refuses a model whose attention softmax computes in float16 or
bfloat16 (e.g. `keras.layers.MultiHeadAttention` under a mixed policy), naming the layer.

    model = build_model("vit", (32, 32, 3), 10, patch_size=4, hidden_size=64, depth=4)
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from models.registry import InputSizes, register_model

# auto picks sides multiple of 8 (patches of side/8 give 64 tokens at most at the cap), from
# 16 px (4x4 patches of 4 px) to 64.
VIT_SIZES = InputSizes(minimum=16, multiple=8, auto_max=64)


@keras.saving.register_keras_serializable(package="mptfx")
class PatchEmbedding(keras.layers.Layer):
    """Images -> (batch, patches, hidden_size): a strided Conv2D plus position embeddings."""

    def __init__(self, patch_size: int, hidden_size: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.patch_size = int(patch_size)
        self.hidden_size = int(hidden_size)
        self.projection = keras.layers.Conv2D(hidden_size, patch_size, strides=patch_size,
                                              dtype=self.dtype_policy, name="projection")

    def build(self, input_shape: tuple) -> None:
        patches = (input_shape[1] // self.patch_size) * (input_shape[2] // self.patch_size)
        self.projection.build(input_shape)
        self.position = self.add_weight(
            shape=(1, patches, self.hidden_size), name="position",
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, images: keras.KerasTensor) -> keras.KerasTensor:
        patches = self.projection(images)
        batch = keras.ops.shape(patches)[0]
        tokens = keras.ops.reshape(patches, (batch, -1, self.hidden_size))
        return tokens + keras.ops.cast(self.position, tokens.dtype)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        patches = (input_shape[1] // self.patch_size) * (input_shape[2] // self.patch_size)
        return (input_shape[0], patches, self.hidden_size)

    def get_config(self) -> dict:
        return {**super().get_config(), "patch_size": self.patch_size,
                "hidden_size": self.hidden_size}


@keras.saving.register_keras_serializable(package="mptfx")
class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention whose softmax computes in float32 under any policy."""

    def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0,
                 **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.dropout = float(dropout)
        policy = self.dtype_policy
        self.qkv = keras.layers.Dense(3 * num_heads * key_dim, dtype=policy, name="qkv")
        self.output_projection = keras.layers.Dense(num_heads * key_dim, dtype=policy,
                                                    name="output")
        self.softmax = keras.layers.Softmax(axis=-1, dtype="float32", name="softmax")
        self.attention_dropout = keras.layers.Dropout(dropout, name="attention_dropout")

    def build(self, input_shape: tuple) -> None:
        self.qkv.build(input_shape)
        self.output_projection.build((*input_shape[:-1], self.num_heads * self.key_dim))

    def call(self, tokens: keras.KerasTensor, training: bool | None = None) -> keras.KerasTensor:
        batch, length = keras.ops.shape(tokens)[0], keras.ops.shape(tokens)[1]
        qkv = keras.ops.reshape(self.qkv(tokens),
                                (batch, length, 3, self.num_heads, self.key_dim))
        qkv = keras.ops.transpose(qkv, (2, 0, 3, 1, 4))  # (3, batch, heads, length, key_dim)
        query, key, value = qkv[0], qkv[1], qkv[2]
        scale = keras.ops.cast(1.0 / self.key_dim ** 0.5, query.dtype)
        scores = keras.ops.matmul(query * scale, keras.ops.transpose(key, (0, 1, 3, 2)))
        weights = keras.ops.cast(self.softmax(scores), value.dtype)
        weights = self.attention_dropout(weights, training=training)
        attended = keras.ops.transpose(keras.ops.matmul(weights, value), (0, 2, 1, 3))
        attended = keras.ops.reshape(attended, (batch, length, self.num_heads * self.key_dim))
        return self.output_projection(attended)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (*input_shape[:-1], self.num_heads * self.key_dim)

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads,
                "key_dim": self.key_dim, "dropout": self.dropout}


def _encoder_block(x: keras.KerasTensor, index: int, num_heads: int, hidden_size: int,
                   mlp_dim: int, dropout: float) -> keras.KerasTensor:
    name = f"block{index + 1}"
    y = keras.layers.LayerNormalization(epsilon=1e-6, dtype="float32", name=f"{name}_ln1")(x)
    y = SelfAttention(num_heads, hidden_size // num_heads, dropout, name=f"{name}_attention")(y)
    y = keras.layers.Dropout(dropout, name=f"{name}_dropout1")(y)
    x = keras.layers.Add(name=f"{name}_add1")([x, y])
    y = keras.layers.LayerNormalization(epsilon=1e-6, dtype="float32", name=f"{name}_ln2")(x)
    y = keras.layers.Dense(mlp_dim, activation="gelu", name=f"{name}_mlp1")(y)
    y = keras.layers.Dropout(dropout, name=f"{name}_dropout2")(y)
    y = keras.layers.Dense(hidden_size, name=f"{name}_mlp2")(y)
    return keras.layers.Add(name=f"{name}_add2")([x, y])


@register_model("vit", head=("logits",), input_sizes=VIT_SIZES)
def build_vit(
    input_shape: Sequence[int],
    num_classes: int,
    *,
    patch_size: int = 4,
    hidden_size: int = 64,
    depth: int = 4,
    num_heads: int = 4,
    mlp_dim: int = 128,
    dropout: float = 0.1,
) -> keras.Model:
    """ViT: patches of `patch_size` px embedded to `hidden_size`, `depth` encoder blocks of
    `num_heads` heads and an MLP of `mlp_dim`, token mean, Dense, float32 softmax."""
    height, width = int(input_shape[0]), int(input_shape[1])
    if patch_size < 1 or height % patch_size or width % patch_size:
        raise ValueError(f"patch_size must divide the input size. Received: patch_size="
                         f"{patch_size}, input {height}x{width}")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size must be a multiple of num_heads. Received: "
                         f"hidden_size={hidden_size}, num_heads={num_heads}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = PatchEmbedding(patch_size, hidden_size, name="patch_embedding")(inputs)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for index in range(depth):
        x = _encoder_block(x, index, num_heads, hidden_size, mlp_dim, dropout)
    x = keras.layers.LayerNormalization(epsilon=1e-6, dtype="float32", name="final_ln")(x)
    x = keras.layers.GlobalAveragePooling1D(name="token_mean")(x)
    x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="vit")
