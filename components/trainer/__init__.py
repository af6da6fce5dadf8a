"""The TFX Trainer's module: `components.trainer.module.run_fn` and its parts.

precision (dtype policy and XLA from the devices), strategy (tf.distribute), lint (mixed-
precision safety), optimizer (loss scaling, gradient accumulation), training_model (the
instrumented train step), callbacks, data (tf.data input), export (float32 SavedModel),
warm_start (Keras weights in the Model artifact), warmup (TF Serving warm-up records).
"""
