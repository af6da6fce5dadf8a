"""The TFX Trainer's module: `components.trainer.module.run_fn` and its parts.

config (the schema of custom_config, composed by pipelines/config.py), runtime (strategy,
precision, XLA, batch; the task), tuning (autotune, batch_size auto), build (the model
that trains), fit (input, callbacks, model.fit), summary (training_summary.json),
precision (dtype policy and XLA from the devices), strategy (tf.distribute), lint (mixed-
precision safety), optimizer (loss scaling, gradient accumulation), training_model (the
instrumented train step), callbacks, data (tf.data input), export (the serving
SavedModel), warm_start (Keras weights in the Model artifact), warmup (TF Serving warm-up
records).
"""
