"""Publishing: integer versions, atomic (no half version ever visible), old ones pruned."""

from __future__ import annotations

import os
import time

import pytest
import tensorflow as tf

from components.core.publish import existing_versions
from components.pusher.publish import PublishError, publish_version


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> str:
    module = tf.Module()
    module.weight = tf.Variable([1.0, 2.0, 3.0])
    module.predict = tf.function(lambda x: x * module.weight,
                                 input_signature=[tf.TensorSpec([3], tf.float32)])
    path = str(tmp_path_factory.mktemp("model") / "serving")
    tf.saved_model.save(module, path)
    return path


def _visible(base) -> list[str]:
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


@pytest.fixture(scope="module")
def other_model(tmp_path_factory) -> str:
    module = tf.Module()
    module.weight = tf.Variable([4.0, 5.0, 6.0])
    path = str(tmp_path_factory.mktemp("model") / "other")
    tf.saved_model.save(module, path)
    return path


def test_versions_count_up_from_one_and_load(saved_model, other_model, tmp_path):
    base = str(tmp_path / "serving" / "digits")
    assert publish_version(saved_model, base) == (1, f"{base}/1")
    publish_version(other_model, base)
    version, path = publish_version(saved_model, base)
    assert version == 3 and _visible(base) == ["1", "2", "3"]
    loaded = tf.saved_model.load(path)
    assert loaded.predict(tf.constant([1.0, 1.0, 1.0])).numpy().tolist() == [1.0, 2.0, 3.0]


def test_same_model_again_adds_no_version(saved_model, tmp_path):
    base = str(tmp_path / "digits")
    assert publish_version(saved_model, base) == (1, f"{base}/1")
    assert publish_version(saved_model, base) == (1, f"{base}/1")
    assert _visible(base) == ["1"]


def test_keep_versions_prunes_the_oldest(saved_model, other_model, tmp_path):
    base = str(tmp_path / "digits")
    for model in (saved_model, other_model, saved_model, other_model):
        publish_version(model, base, keep_versions=2)
    assert existing_versions(base) == [3, 4]


def test_copy_failing_midway_leaves_no_new_version_and_next_push_succeeds(
    saved_model, other_model, tmp_path
):
    base = str(tmp_path / "digits")
    publish_version(other_model, base)
    copied = []

    def copy_then_fail(source: str, destination: str) -> None:
        if len(copied) == 1:
            raise OSError("disk full (injected)")
        tf.io.gfile.copy(source, destination, overwrite=True)
        copied.append(destination)

    with pytest.raises(PublishError, match=f"{base}/2 failed, nothing published: disk full"):
        publish_version(saved_model, base, copy_file=copy_then_fail)
    assert copied, "the copy had started before it failed"
    assert _visible(base) == ["1"]  # no version 2, no staging folder left behind
    assert publish_version(saved_model, base) == (2, f"{base}/2")


def test_saved_model_pb_is_copied_last(saved_model, tmp_path):
    order = []

    def recording_copy(source: str, destination: str) -> None:
        order.append(os.path.basename(destination))
        tf.io.gfile.copy(source, destination, overwrite=True)

    publish_version(saved_model, str(tmp_path / "m"), copy_file=recording_copy)
    assert order[-1] == "saved_model.pb" and len(order) > 1


def test_stale_staging_from_a_killed_push_is_cleaned(saved_model, tmp_path):
    base = tmp_path / "digits"
    stale = base / f".staging-{time.time() - 7200:.0f}-deadbeef"
    stale.mkdir(parents=True)
    (stale / "variables").mkdir()
    publish_version(saved_model, str(base))
    assert _visible(base) == ["1"]


def test_not_a_saved_model_is_refused(tmp_path):
    with pytest.raises(PublishError, match="no saved_model.pb in"):
        publish_version(str(tmp_path), str(tmp_path / "out"))


def test_two_concurrent_pushes_both_succeed_with_distinct_whole_versions(
        saved_model, other_model, tmp_path):
    import threading

    base = str(tmp_path / "digits")
    both_copying = threading.Barrier(2, timeout=30)

    def overlapping_copy(source: str, destination: str) -> None:
        # Both pushers have reserved a number and are copying at the same moment.
        if source.endswith("saved_model.pb"):
            both_copying.wait()
        tf.io.gfile.copy(source, destination, overwrite=True)

    results, errors = {}, []

    def push(name: str, model: str) -> None:
        try:
            results[name] = publish_version(model, base, copy_file=overlapping_copy)
        except Exception as error:  # collected: the assertion below names it
            errors.append(error)

    threads = [threading.Thread(target=push, args=args)
               for args in (("a", saved_model), ("b", other_model))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(version for version, _ in results.values()) == [1, 2]
    assert _visible(base) == ["1", "2"]  # no reservation or staging folder left
    for version in (1, 2):
        assert tf.saved_model.load(os.path.join(base, str(version))) is not None


def test_a_reservation_left_by_a_killed_pusher_is_skipped_then_cleaned(saved_model, tmp_path):
    base = tmp_path / "digits"
    (base / ".reserved-1").mkdir(parents=True)  # a pusher is (or was) publishing version 1
    assert publish_version(saved_model, str(base))[0] == 2
    old = time.time() - 7200
    os.utime(base / ".reserved-1", (old, old))
    publish_version(saved_model, str(base))  # same model: no new version, stale one cleaned
    assert _visible(base) == ["2"]


def test_half_version_left_on_an_object_store_is_removed_before_the_next_push(
        saved_model, tmp_path):
    # ram:// is TensorFlow's in-memory filesystem: no atomic rename, like gs:// or s3://.
    base = f"ram://{tmp_path.name}/digits"
    half = f"{base}/1/variables"
    tf.io.gfile.makedirs(half)
    tf.io.gfile.GFile(f"{half}/variables.index", "wb").write(b"partial copy, killed")
    version, version_dir = publish_version(saved_model, base)
    assert version == 1 and existing_versions(base) == [1]
    assert tf.io.gfile.exists(f"{version_dir}/saved_model.pb")
