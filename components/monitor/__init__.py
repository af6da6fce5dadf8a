"""From served traffic back to training: the request log TF Serving's sidecar writes, the
features compared at training and serving time, each version's reference, and TFDV's drift
and skew verdicts (docs/guide/monitoring.md).

- `features`: the one feature function; `config`: `serving.request_log` and `monitor`.
- `reference`: written by the Trainer's `run_fn` into the SavedModel's assets.extra.
- `request_log`, `proxy`: PredictionLog files and the request logger that writes them.
- `traffic`, `compare`, `judge`, `report`: rows of logged traffic, TFDV's comparators, the
  judgement of a window, report.md / report.json / distributions.png.

Nothing is re-exported: the config is imported by every command and must stay light.
"""
