"""The monitor's parts in this process: image features, the request log's files, TFDV's
drift and skew verdicts on feature rows, a version's judgement, the config and the window.

The PredictionLogs here are built from REST JSON bodies by the request logger's own
`predict_log_from_rest`, with the SignatureDef a classifier exported by the Trainer has
(examples: string -> probabilities, class_id, class_name)."""

from __future__ import annotations

import base64
import datetime as dt
import io

import numpy as np
import pytest
from PIL import Image

from components.errors import UsageError
from components.monitor import compare as compare_lib
from components.monitor.config import MonitorSection
from components.monitor.features import image_features, pixel_features
from components.monitor.judge import (
    DRIFTED,
    NO_REFERENCE,
    NOT_ENOUGH_TRAFFIC,
    STEADY,
    judge_version,
)
from components.monitor.reference import ReferenceMissing, read_reference, store_reference
from components.monitor.request_log import RequestLogWriter, predict_log_from_rest, read_window
from components.monitor.traffic import rows_of_log
from pipelines.config import ConfigError, load_config
from pipelines.monitor_command import parse_time

LABELS = [str(d) for d in range(10)]
DAY = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def encode(pixels: np.ndarray, fmt: str = "PNG", **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt, **options)
    return out.getvalue()


def digit_like(rng: np.random.Generator, brightness: float = 1.0, size: int = 8) -> np.ndarray:
    """A dark background with a bright blob, as the digits are; `brightness` scales it."""
    image = np.zeros((size, size), np.uint8)
    top, left = rng.integers(0, size // 2, 2)
    image[top:top + size // 2, left:left + size // 2] = rng.integers(160, 256)
    return (image * brightness).astype(np.uint8)


# -- features ---------------------------------------------------------------------------------


def test_features_of_a_png_a_jpeg_and_raw_pixels_describe_the_same_image():
    pixels = np.zeros((8, 10), np.uint8)
    pixels[:, 5:] = 255  # half black, half white
    png = image_features(encode(pixels))
    assert png == {"height": 8, "width": 10, "channels": 1, "brightness": 0.5,
                   "contrast": 0.5, "dark_fraction": 0.5, "bright_fraction": 0.5,
                   "encoding": "PNG"}
    jpeg = image_features(encode(np.stack([pixels] * 3, -1), "JPEG", quality=95))
    assert jpeg["encoding"] == "JPEG" and jpeg["channels"] == 3
    assert abs(jpeg["brightness"] - 0.5) < 0.02 and abs(jpeg["dark_fraction"] - 0.5) < 0.1
    raw = pixel_features(pixels[..., None])
    assert raw == {**png, "encoding": "raw"}


def test_alpha_is_not_brightness_and_16_bit_pngs_are_on_the_same_scale():
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 3] = 255  # opaque black
    assert image_features(encode(rgba))["brightness"] == 0.0
    assert image_features(encode(rgba))["channels"] == 4
    sixteen = Image.fromarray(np.full((4, 4), 65535, np.uint16))
    out = io.BytesIO()
    sixteen.save(out, format="PNG")
    assert image_features(out.getvalue())["brightness"] == pytest.approx(1.0)


def test_bytes_that_are_no_image_have_no_pixel_features_and_say_undecodable():
    row = image_features(b"\x89PNG\r\n\x1a\n but then nothing")
    assert row["encoding"] == "undecodable"
    assert row["height"] is None and row["brightness"] is None


# -- the request log --------------------------------------------------------------------------


def classifier_signature():
    """The SignatureDef of the Trainer's `serving_default` (dtypes are what the log needs)."""
    from tensorflow.core.protobuf import meta_graph_pb2

    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    signature.inputs["examples"].dtype = 7          # DT_STRING
    signature.outputs["probabilities"].dtype = 1    # DT_FLOAT
    signature.outputs["class_id"].dtype = 9         # DT_INT64
    signature.outputs["class_name"].dtype = 7
    return signature


def example_of(png: bytes) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))})
    ).SerializeToString()


def logged_call(pngs: list[bytes], classes: list[int], when: dt.datetime, version: int = 3,
                rows: bool = False):
    """The PredictionLog of one REST predict call answering `classes` for `pngs`."""
    encoded = [{"b64": base64.b64encode(example_of(p)).decode()} for p in pngs]
    probabilities = [[0.9 if k == c else 0.1 / 9 for k in range(10)] for c in classes]
    if rows:  # TF Serving's row format: instances in, predictions out
        request = {"instances": encoded}
        response = {"predictions": [{"probabilities": p, "class_id": c, "class_name": str(c)}
                                    for p, c in zip(probabilities, classes, strict=True)]}
    else:
        request = {"signature_name": "serving_default", "inputs": {"examples": encoded}}
        response = {"outputs": {"probabilities": probabilities, "class_id": classes,
                                "class_name": [str(c) for c in classes]}}
    return predict_log_from_rest("digits", version, request, response, classifier_signature(),
                                 sampling_rate=0.05, now=when)


def test_logged_calls_are_read_back_by_day_folder_and_window(tmp_path):
    rng = np.random.default_rng(0)
    pngs = [encode(digit_like(rng)) for _ in range(3)]
    writer = RequestLogWriter(tmp_path)
    first = writer.write(logged_call(pngs, [1, 2, 3], DAY))
    writer.write(logged_call(pngs[:1], [4], DAY + dt.timedelta(hours=1), rows=True))
    second_day = writer.write(logged_call(pngs[:2], [5, 6], DAY + dt.timedelta(days=1)))
    writer.close()
    assert first.parent == tmp_path / "digits" / "2026-12-01"
    assert second_day.parent == tmp_path / "digits" / "2026-12-02"

    window = read_window(tmp_path, "digits", DAY - dt.timedelta(hours=1),
                         DAY + dt.timedelta(hours=2))
    assert window.problems == [] and len(window.records) == 2
    [log, row_format] = window.records
    assert log.log_metadata.model_spec.version.value == 3
    assert log.log_metadata.sampling_config.sampling_rate == 0.05
    assert log.log_metadata.timestamp_secs == int(DAY.timestamp())
    rows = rows_of_log(log, LABELS)
    assert [r["predicted_class"] for r in rows] == ["1", "2", "3"]
    assert [r["encoding"] for r in rows] == ["PNG"] * 3
    assert rows[0]["confidence"] == pytest.approx(0.9)
    assert rows[0]["brightness"] == image_features(pngs[0])["brightness"]
    assert [r["predicted_class"] for r in rows_of_log(row_format, LABELS)] == ["4"]
    assert len(read_window(tmp_path, "digits", DAY, DAY + dt.timedelta(days=2)).records) == 3


def test_truncated_corrupt_and_foreign_log_files_are_each_named_in_one_line(tmp_path):
    import tensorflow as tf

    rng = np.random.default_rng(1)
    pngs = [encode(digit_like(rng)) for _ in range(2)]
    writer = RequestLogWriter(tmp_path)
    for minute in range(3):
        path = writer.write(logged_call(pngs, [1, 2], DAY + dt.timedelta(minutes=minute)))
    writer.close()
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a writer killed in the middle of its third record
    folder = path.parent
    (folder / "garbage.tfrecord").write_bytes(b"this is not a TFRecord file at all" * 3)
    with tf.io.TFRecordWriter(str(folder / "foreign.tfrecord")) as foreign:
        foreign.write(b"\xff\xff\xff not a PredictionLog")

    window = read_window(tmp_path, "digits", DAY, DAY + dt.timedelta(hours=1))
    assert len(window.records) == 2  # the whole records before the damage are kept
    problems = {p.split(":")[0]: p for p in window.problems}
    assert set(problems) == {str(path), str(folder / "garbage.tfrecord"),
                             str(folder / "foreign.tfrecord")}
    assert "truncated or corrupt after 2 records" in problems[str(path)]
    assert "truncated or corrupt after 0 records" in problems[str(folder / "garbage.tfrecord")]
    assert "record 1 is not a PredictionLog" in problems[str(folder / "foreign.tfrecord")]
    assert all("\n" not in p for p in window.problems)


# -- TFDV's verdicts --------------------------------------------------------------------------


def rows_of(images: list[np.ndarray], classes: list[int]) -> list[dict]:
    rows = []
    for image, label in zip(images, classes, strict=True):
        row = image_features(encode(image))
        row.update(predicted_class=str(label), confidence=0.9)
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def reference_rows():
    rng = np.random.default_rng(2)
    classes = [int(c) for c in rng.integers(0, 10, 400)]
    return rows_of([digit_like(rng) for _ in classes], classes)


@pytest.fixture(scope="module")
def reference_statistics(reference_rows):
    return (compare_lib.statistics_of(reference_rows[:100]),
            compare_lib.statistics_of(reference_rows[100:]))


def served(count: int, seed: int, brightness: float = 1.0, size: int = 8,
           one_class: int | None = None) -> list[dict]:
    rng = np.random.default_rng(seed)
    classes = [one_class if one_class is not None else int(c)
               for c in rng.integers(0, 10, count)]
    return rows_of([digit_like(rng, brightness, size) for _ in classes], classes)


def test_traffic_like_the_reference_has_not_moved_darker_and_larger_images_have(
        reference_statistics):
    eval_stats, train_stats = reference_statistics
    monitor = MonitorSection()
    same = compare_lib.compare(compare_lib.statistics_of(served(120, seed=3)), eval_stats,
                               train_stats, monitor)
    assert same.moved() == []
    assert set(same.of("drift")) == set(same.of("skew")) == {
        "height", "width", "channels", "brightness", "contrast", "dark_fraction",
        "bright_fraction", "encoding", "predicted_class", "confidence"}
    changed = compare_lib.compare(
        compare_lib.statistics_of(served(120, seed=4, brightness=0.4, size=16)),
        eval_stats, train_stats, monitor)
    assert {"brightness", "height", "width"} <= set(changed.moved("drift"))
    assert {"brightness", "height", "width"} <= set(changed.moved("skew"))
    assert "predicted_class" not in changed.moved()
    measured = changed.of("drift")["height"]
    assert (measured.measure, measured.threshold) == ("jensen_shannon_divergence", 0.2)
    assert measured.value > 0.9


def test_one_class_moves_the_predicted_class_by_l_infinity_and_thresholds_apply(
        reference_statistics):
    eval_stats, train_stats = reference_statistics
    one_class = compare_lib.statistics_of(served(60, seed=5, one_class=3))
    verdict = compare_lib.compare(one_class, eval_stats, train_stats, MonitorSection())
    assert verdict.moved("drift")[0] == "predicted_class"
    measured = verdict.of("drift")["predicted_class"]
    assert measured.measure == "l_infinity" and measured.value > 0.8
    relaxed = MonitorSection.model_validate({
        "drift": {"features": {"predicted_class": 1.0}},
        "skew": {"features": {"predicted_class": 1.0}}})
    assert "predicted_class" not in compare_lib.compare(one_class, eval_stats, train_stats,
                                                        relaxed).moved()


def test_a_version_is_judged_against_its_own_reference_and_needs_enough_traffic(
        tmp_path, reference_statistics):
    eval_stats, train_stats = reference_statistics
    version_dir = tmp_path / "serving" / "digits" / "3"
    store_reference(str(version_dir), eval_stats, train_stats,
                    {"label_names": LABELS, "images": {"eval": 100, "train": 300}})
    rng = np.random.default_rng(6)
    dark = [encode(digit_like(rng, brightness=0.3)) for _ in range(40)]
    logs = [logged_call(dark[i:i + 4], [1, 2, 3, 4], DAY) for i in range(0, 40, 4)]
    serving_dir = tmp_path / "serving"

    verdict = judge_version(3, logs, serving_dir, "digits", MonitorSection(min_images=30))
    assert verdict.status == DRIFTED and verdict.images == 40
    assert "brightness" in verdict.moved()
    few = judge_version(3, logs[:2], serving_dir, "digits", MonitorSection(min_images=30))
    assert few.status == NOT_ENOUGH_TRAFFIC and few.comparison is None
    assert few.reason == "8 logged images < monitor.min_images 30"
    steady = judge_version(3, logs, serving_dir, "digits", MonitorSection(
        min_images=30, drift={"jensen_shannon": 1.0, "l_infinity": 1.0},
        skew={"jensen_shannon": 1.0, "l_infinity": 1.0}))
    assert steady.status == STEADY, [m for m in steady.comparison.measurements if m.moved]
    missing = judge_version(4, logs, serving_dir, "digits", MonitorSection())
    assert missing.status == NO_REFERENCE and str(serving_dir / "digits" / "4") in missing.reason
    with pytest.raises(ReferenceMissing, match="holds no monitoring reference"):
        read_reference(serving_dir / "digits" / "4")


# -- configuration and the window -------------------------------------------------------------


def test_defaults_and_the_request_log_folder():
    config = load_config("configs/local.yaml")
    assert config.serving.request_log.sampling_rate == 0.05
    assert config.serving.request_log.folder("/ws").as_posix() == "/ws/request_log"
    assert config.monitor.reports_folder("/ws").as_posix() == "/ws/monitor"
    assert config.monitor.drift.threshold("brightness") == 0.2
    assert config.monitor.drift.threshold("predicted_class") == 0.2
    assert config.monitor.skew.threshold("height") == 0.3


@pytest.mark.parametrize("override, named", [
    ("serving.request_log.sampling_rate=1.5", "'serving.request_log.sampling_rate'"),
    ("serving.request_log.dir='  '", "serving.request_log.dir is blank"),
    ("monitor.report_dir='  '", "monitor.report_dir is blank"),
    ("monitor.min_images=0", "'monitor.min_images'"),
    ("monitor.drift.features={brightnes: 0.3}", "unknown feature 'brightnes'"),
    ("monitor.skew.features={height: 0}", "the threshold of 'height' must be in (0, 1]"),
    ("monitor.thresholds=1", "unknown config key 'monitor.thresholds'"),
])
def test_bad_monitor_settings_are_named_in_one_line(override, named):
    with pytest.raises(ConfigError) as caught:
        load_config("configs/local.yaml", [override])
    assert named in str(caught.value) and "\n" not in str(caught.value)


def test_the_window_is_a_duration_or_an_iso_time():
    now = dt.datetime(2026, 12, 2, 3, 0, tzinfo=dt.timezone.utc)
    assert parse_time("24h", now, "--since") == now - dt.timedelta(hours=24)
    assert parse_time("90m", now, "--since") == now - dt.timedelta(minutes=90)
    assert parse_time("7d", now, "--since") == now - dt.timedelta(days=7)
    assert parse_time("2026-12-01T00:00:00Z", now, "--since") == dt.datetime(
        2026, 12, 1, tzinfo=dt.timezone.utc)
    assert parse_time("2026-12-01T00:00:00", now, "--since").tzinfo == dt.timezone.utc
    with pytest.raises(UsageError, match="--since expects a duration such as 24h"):
        parse_time("yesterday", now, "--since")


def test_a_drift_trigger_reaches_summary_json_and_the_mlflow_run_tags(tmp_path):
    from components.run_summary import RunSummary
    from components.tracking import content
    from tests.run_summaries import fake_summary

    summary = fake_summary(tmp_path)
    assert "trigger" not in summary.to_dict()  # a run nobody triggered says nothing
    summary.trigger = {"kind": "drift", "features": ["brightness", "height"], "versions": [3],
                       "report": "/ws/monitor/20261202T020000Z/report.md"}
    reread = RunSummary.parse(summary.to_dict())
    assert reread.trigger.kind == "drift" and reread.trigger.versions == [3]
    tags = content.run_tags(reread, None, {})
    assert tags["mptfx.trigger"] == "drift"
    assert tags["mptfx.trigger.features"] == "brightness,height"
    assert tags["mptfx.trigger.report"] == "/ws/monitor/20261202T020000Z/report.md"


def test_served_images_are_exported_by_predicted_class_as_sent(tmp_path):
    from components.monitor.traffic import export_images

    rng = np.random.default_rng(7)
    pngs = [encode(digit_like(rng)) for _ in range(3)]
    jpeg = encode(np.stack([digit_like(rng)] * 3, -1), "JPEG")
    logs = [logged_call(pngs, [1, 1, 7], DAY), logged_call([jpeg], [7], DAY)]
    assert export_images(logs, tmp_path / "label-me", LABELS) == 4
    written: dict[str, list[bytes]] = {}
    for path in sorted((tmp_path / "label-me").rglob("*.*")):
        written.setdefault(path.parent.name, []).append(path.read_bytes())
    assert sorted(written["1"]) == sorted(pngs[:2])
    assert sorted(written["7"]) == sorted([pngs[2], jpeg])
    assert len(list((tmp_path / "label-me" / "7").glob("*.jpg"))) == 1


def test_photos_sent_as_bytes_are_logged_featured_and_exported_as_sent(tmp_path):
    """`predict_image_bytes` in TF Serving's row format: {"instances": [{"b64": file}]}."""
    from tensorflow.core.protobuf import meta_graph_pb2

    from components.monitor.traffic import export_images

    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    signature.inputs["image_bytes"].dtype = 7
    for name, dtype in (("probabilities", 1), ("class_id", 9), ("class_name", 7)):
        signature.outputs[name].dtype = dtype
    rng = np.random.default_rng(8)
    png, jpeg = encode(digit_like(rng)), encode(np.stack([digit_like(rng)] * 3, -1), "JPEG")
    request = {"signature_name": "predict_image_bytes",
               "instances": [{"b64": base64.b64encode(f).decode()} for f in (png, jpeg)]}
    response = {"predictions": [
        {"probabilities": [0.9 if k == c else 0.1 / 9 for k in range(10)], "class_id": c,
         "class_name": str(c)} for c in (2, 5)]}
    log = predict_log_from_rest("digits", 3, request, response, signature, now=DAY)
    rows = rows_of_log(log, LABELS)
    assert [(row["encoding"], row["predicted_class"]) for row in rows] == [("PNG", "2"),
                                                                          ("JPEG", "5")]
    for row, sent in zip(rows, (png, jpeg), strict=True):
        assert {key: row[key] for key in image_features(sent)} == image_features(sent)
        assert row["confidence"] == pytest.approx(0.9)
    assert export_images([log], tmp_path, LABELS) == 2
    assert (next((tmp_path / "5").glob("*.jpg"))).read_bytes() == jpeg


def test_no_request_log_folder_or_a_bad_window_is_exit_2_in_one_line(tmp_path, capsys):
    from pipelines.cli import main

    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert main(["monitor", "--workspace", str(workspace)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == (f"mptfx: error: no request log at {workspace}/request_log "
                    "(serving.request_log.dir): is `mptfx request-logger` in front of "
                    "TF Serving?")
    (workspace / "request_log").mkdir()
    assert main(["monitor", "--workspace", str(workspace), "--since", "a while"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("mptfx: error: --since expects a duration such as 24h, 90m, 7d")
    assert main(["monitor", "--workspace", str(workspace), "--since", "2026-12-02T00:00:00Z",
                 "--until", "2026-12-01T00:00:00Z"]) == 2
    assert "must be before --until" in capsys.readouterr().err
