"""`mptfx predict`: the served model's answers for new images, as a stream of rows.

- `sources.py`: what is read (image files one by one, from a list or under a folder, and
  TFRecord files of tf.Examples) and why an input could not be read;
- `served.py`: which model answers (a TF Serving version of the workspace by label or
  number, or one of its TF Lite variants) and how it is run;
- `run.py`: the Trainer's decoder in a tf.data pipeline, the model over its batches, and
  the rows (CSV or JSON Lines) written as they come.

The command itself (arguments, terminal, exit codes) is pipelines/predict_command.py.
"""
