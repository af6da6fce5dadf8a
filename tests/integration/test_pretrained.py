"""Keras Applications by name, starting from a backbone's weights: `model.params.weights`.

The weights files are made here by the backbones' own `save_weights` (no model hub is
reachable from this machine); `imagenet` is tested at Keras' download boundary: the real
`keras.utils.get_file` runs, and the test double is its `urlretrieve`, which fails as a
machine without a network does.

What a user would check:
- each model runs its own ImageNet preprocessing in the graph: fed [0, 1] images, its
  backbone gives what the Keras Applications backbone gives on the preprocessing Keras
  documents for it;
- training starts from the file, head first, then the top blocks: checked on the run from
  a pretrained file in test_pretrained_backbone.py;
- `imagenet` that cannot be downloaded is one line naming the URL and the cache path.
"""

from __future__ import annotations

import urllib.error

import keras
import numpy as np
import pytest

import models
from components.trainer.pretrained import WeightsUnavailableError, check_imagenet_available
from models.registry import model_backbone
from tests.trainer_testdata import fit_fields, fn_args_dict, write_digits_examples

SIZE = (32, 32)


def _backbone_file(name: str, path: str, seed: int = 5) -> str:
    """A backbone alone, built as the registry builds it, saved with its own save_weights."""
    keras.utils.set_random_seed(seed)
    backbone = model_backbone(name)(SIZE, None)
    backbone.save_weights(path)
    return path


@pytest.mark.parametrize("name, reference", [
    ("mobilenet_v3_small", lambda x: x * 255.0),  # its own Rescaling to [-1, 1] follows
    ("efficientnet_v2_b0", lambda x: x * 255.0),  # its own Rescaling + Normalization
    ("resnet50", lambda x: keras.applications.resnet50.preprocess_input(x * 255.0)),
])
def test_each_model_preprocesses_in_the_graph_as_keras_documents(name, reference, tmp_path):
    from components.trainer.pretrained import load_start_weights

    path = _backbone_file(name, str(tmp_path / f"{name}.weights.h5"))
    model = models.build_model(name, (*SIZE, 3), 4)
    load_start_weights(model, path, name, {}, (*SIZE, 3), 4)
    features = keras.Model(model.inputs, model.get_layer("logits").input)
    backbone = model_backbone(name)(SIZE, None)
    backbone.load_weights(path)
    images = np.random.default_rng(0).random((2, *SIZE, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(features(images)),
                               np.asarray(backbone(reference(images.copy()))),
                               rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 40)


def test_a_file_of_neither_the_model_nor_its_backbone_is_one_line(examples_uri, tmp_path):
    other = _backbone_file("mobilenet_v3_large", str(tmp_path / "large.weights.h5"))
    fields = fn_args_dict(examples_uri, str(tmp_path / "out"), model="mobilenet_v3_small",
                          input_size=SIZE, params={"weights": other}, autotune="off")
    with pytest.raises(ValueError) as error:
        fit_fields(fields)
    message = str(error.value)
    assert "\n" not in message and f"model.params.weights {other}" in message
    assert "nor is it mobilenet_v3_small's backbone alone" in message


def test_imagenet_without_a_network_names_the_url_and_the_cache_path(tmp_path, monkeypatch):
    from keras.src.utils import file_utils  # the download boundary: a machine with no network

    def no_network(url, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(file_utils, "urlretrieve", no_network)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    with pytest.raises(WeightsUnavailableError) as error:
        check_imagenet_available("mobilenet_v3_small", "auto")
    message = str(error.value)
    assert "\n" not in message
    assert "model.params.weights imagenet: cannot download https://storage.googleapis.com/" \
           in message
    cached = tmp_path / "keras" / "models" / \
        "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5"
    assert f"place that file at {cached}" in message
