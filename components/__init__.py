"""mptfx's TFX components and the base they share.

Importing this package turns TensorFlow's oneDNN kernels on (`TF_ENABLE_ONEDNN_OPTS=1`)
unless the environment already says otherwise. TensorFlow turns them on by itself only on
CPUs with AVX512_VNNI, AVX512_BF16 or AMX; on an AVX2-only EPYC its own Eigen kernels
trained ResNet-50 6.8x slower, photo_cnn 2.1x and seed_cnn 1.7x (MobileNetV3Small the same;
docs/guide/training.md). TensorFlow reads the variable once, at its first op, so it is set
here, before any component runs one. `TF_ENABLE_ONEDNN_OPTS=0` keeps Eigen's kernels.
"""

import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
