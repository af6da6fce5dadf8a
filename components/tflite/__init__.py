"""TF Lite export: conversion variants, parity gate against the SavedModel, TFX component.

- `components.tflite.convert`: `convert(saved_model_dir, variant, ...)`, `VARIANTS`.
- `components.tflite.parity`: `check_parity(...)` and the gate per variant.
- `components.tflite.data`: `load_split_images(...)` (label names: `components.examples_format`).
- `components.tflite.component`: the TFX component `TFLiteExport`, artifact `TFLiteModels`.

Nothing is re-exported here: the module `convert` and the function `convert` share a name,
and only the component module imports TFX.
"""
