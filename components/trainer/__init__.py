"""The TFX Trainer's module: `components.trainer.module.run_fn` and its parts."""
