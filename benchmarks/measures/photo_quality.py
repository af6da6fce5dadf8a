"""What `mptfx bench --sections photo_quality` measures: the model a default `mptfx run
--data <photos>` makes, beside the TensorFlow tutorial's script on the same folder.

The photo set is made from real photographs (scikit-learn's two sample photos, china.jpg
and flower.jpg, 427x640 each): each photo is cut into four vertical strips, one class
each (8 classes), and every example is a random square crop inside its strip (half the
strip's width to all of it), mirrored at random and saved as a 224x224 JPEG. Strips of one
photo share its colours and light, so what tells them apart is detail: the temple's roof
or its trees, the flower's centre or its petals. A held-out test folder is cut the same way
with another seed; both models are scored on it, so neither's own split decides.

    make_strip_photos("/tmp/photos", per_class=250, seed=0)        # 2,000 training photos
    tutorial = train_tutorial_model("/tmp/photos", "/tmp/test")    # tutorial_classification
    mptfx = run_mptfx("/tmp/photos", "/tmp/test", "/tmp/ws")       # the default mptfx run
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

from benchmarks.measures.mptfx_runs import run_json

PHOTO_SIDE = 224
PHOTO_QUALITY = 90
STRIPS = 4


def make_strip_photos(root: str, per_class: int, seed: int, side: int = PHOTO_SIDE,
                      photos: tuple[str, ...] = ("china", "flower")) -> dict[str, Any]:
    """Writes `per_class` JPEGs of `side` px per class into `root/<photo>_<strip>/`, for
    each of the sample `photos` (once per root: the same arguments give the same files)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    if not os.path.isdir(root):
        staging = root + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        sample = load_sample_images()
        rng = np.random.default_rng(seed)
        for filename, image in zip(sample.filenames, sample.images, strict=True):
            stem = os.path.splitext(os.path.basename(filename))[0]
            if stem not in photos:
                continue
            height, width = image.shape[:2]
            for strip in range(STRIPS):
                folder = os.path.join(staging, f"{stem}_{strip}")
                os.makedirs(folder)
                region = image[:, strip * width // STRIPS:(strip + 1) * width // STRIPS]
                side_max = region.shape[1]
                for index in range(per_class):
                    cut = int(rng.integers(side_max // 2, side_max + 1))
                    top = int(rng.integers(0, height - cut + 1))
                    left = int(rng.integers(0, side_max - cut + 1))
                    crop = Image.fromarray(region[top:top + cut, left:left + cut])
                    crop = crop.resize((side, side), Image.BILINEAR)
                    if rng.random() < 0.5:
                        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
                    crop.save(os.path.join(folder, f"IMG_{seed}_{index:04d}.jpg"),
                              quality=PHOTO_QUALITY)
        os.rename(staging, root)
    files = glob.glob(os.path.join(root, "*", "*.jpg"))
    return {"root": root, "photos": len(files), "classes": len(photos) * STRIPS,
            "bytes": sum(os.path.getsize(path) for path in files)}


def run_mptfx(data_dir: str, test_dir: str, workspace: str,
              extra_args: list[str] | None = None) -> dict[str, Any]:
    """`mptfx run --data data_dir --workspace workspace` as a user types it (plus
    `extra_args`), then the pushed model's accuracy on `test_dir`."""
    summary, seconds, command = run_json(["--data", data_dir, "--workspace", workspace,
                                          *(extra_args or [])])
    trainer, evaluation = summary.get("trainer") or {}, summary.get("eval") or {}
    pushed = summary.get("pushed") or {}
    if not pushed.get("pushed"):
        raise RuntimeError(f"mptfx run pushed nothing: {evaluation.get('why_not_blessed')}")
    return {
        "seconds": seconds,
        "trainer_seconds": (summary.get("components", {}).get("Trainer") or {}).get("seconds"),
        "eval_accuracy": evaluation.get("accuracy"),
        "test_accuracy": served_accuracy(pushed["path"], test_dir),
        "model": trainer.get("model"),
        "model_reason": trainer.get("model_reason"),
        "input_size": trainer.get("input_size"),
        "input_size_reason": trainer.get("input_size_reason"),
        "precision": trainer.get("precision"),
        "epochs": trainer.get("epochs"),
        "images_per_sec": trainer.get("images_per_sec"),
        "command": command,
    }


def served_accuracy(model_dir: str, test_dir: str) -> float:
    """Accuracy of the exported SavedModel's `predict_images` signature on `test_dir`'s
    class folders (class names as the model's `class_name` output gives them)."""
    import numpy as np
    import tensorflow as tf

    serving = tf.saved_model.load(model_dir).signatures["predict_images"]
    files = sorted(glob.glob(os.path.join(test_dir, "*", "*.jpg")))
    correct = 0
    for start in range(0, len(files), 64):
        batch = files[start:start + 64]
        images = tf.stack([tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
                           for path in batch])
        names = serving(images=images)["class_name"].numpy()
        truth = [os.path.basename(os.path.dirname(path)).encode() for path in batch]
        correct += int(np.sum(np.asarray(names) == np.asarray(truth)))
    return correct / len(files)
