"""Run summaries for tests: summary.json as `mptfx run` writes it, typed, with the Trainer's
and the Pusher's folders on disk, for the tracking tests that need no pipeline run."""

from __future__ import annotations

import json
from pathlib import Path

from components.run_summary import RunSummary


def fake_summary(root: Path, *, blessed: bool = True, pushed: bool = True) -> RunSummary:
    """summary.json as `mptfx run` writes it, with the Trainer and Pusher folders on disk."""
    model_uri = root / "tfx" / "Trainer" / "model" / "7"
    (model_uri / "Format-Serving").mkdir(parents=True)
    (model_uri / "Format-Serving" / "saved_model.pb").write_bytes(b"x" * 1000)
    logs = root / "tfx" / "Trainer" / "model_run" / "7" / "logs"
    logs.mkdir(parents=True)
    (logs.parent / "training_summary.json").write_text(json.dumps({
        "precision": "mixed_float16", "history": {
            "loss": [2.0, 1.0, 0.5], "accuracy": [0.3, 0.6, 0.9],
            "val_loss": [1.5, 0.9, 0.6], "val_accuracy": [0.4, 0.7, 0.85]},
        "images_per_sec_per_epoch": [100.0, 250.0, 260.0],
        "loss_scale_per_epoch": [32768.0, 16384.0, 16384.0],
    }))
    serving = root / "serving" / "digits" / "3"
    serving.mkdir(parents=True)
    (serving / "saved_model.pb").write_bytes(b"y" * 2500)
    return RunSummary.parse({
        "status": "completed", "run_id": "20260101-000000-abcd", "pipeline": "mptfx-digits",
        "workspace": str(root), "data_root": str(root / "data"),
        "summary_path": str(root / "runs" / "summary.json"), "log_path": "pipeline.log",
        "config": {"trainer": {"precision": "auto", "xla": "auto", "epochs": 3},
                   "evaluator": {"min_accuracy": 0.9, "max_regression": 0.01},
                   "pusher": {"model_name": "digits"}, "data": {"source": "builtin:digits"}},
        "components": {
            "Trainer": {"status": "completed", "seconds": 12.5, "execution_id": 7},
            "Evaluator": {"status": "completed", "seconds": 9.0, "execution_id": 8},
            "Pusher": {"status": "completed", "seconds": 0.2, "execution_id": 9},
        },
        "data": {"images": 1797, "quarantined": 2, "split_counts": {"train": 1434, "eval": 363}},
        "trainer": {
            "model": "seed_cnn", "precision": "mixed_float16", "precision_reason": "GPU",
            "strategy": "mirrored", "replicas": 2, "xla": True, "xla_reason": "GPU",
            "epochs": 3, "batch_size": 64, "global_batch_size": 128, "learning_rate": 0.002,
            "images_per_sec": 255.0, "input_size": [16, 16], "channels": 1,
            "label_names": [str(d) for d in range(10)], "train_seconds": 8.0,
            "model_uri": str(model_uri), "tensorboard_logs": str(logs),
        },
        "eval": {"blessed": blessed, "accuracy": 0.97, "recall_per_class": {"0": 1.0, "3": 0.9},
                 **({} if blessed else {"why_not_blessed": ["accuracy below 0.99"]})},
        "pushed": {"pushed": True, "path": str(serving), "version": "3"} if pushed
        else {"pushed": False},
        "tflite": {"fp32": {"bytes": 600000, "agreement": 1.0, "published": True},
                   "int8": {"bytes": 160000, "agreement": 0.99, "published": True}},
        "wall_seconds": 61.5,
    })
