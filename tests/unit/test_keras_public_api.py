"""Keras' and TensorFlow's public API only, outside components/trainer/keras_private.py.

Read statically with `ast` over components/, pipelines/ and models/. A private name is one
with a leading underscore that is not a dunder. Refused:

- `x._name` on any object (`strategy.extended._in_multi_worker_mode()`, `super()._hook()`,
  `self._loss_tracker` in a keras.Model subclass), unless the module itself binds `_name`
  (a `def _name`, a `self._name = ...`, a `_name` variable): then it is the module's own;
- `getattr`/`hasattr`/`setattr`/`delattr` with a literal private name the module does not bind;
- a `def _name` in a class that overrides a private method of Keras' or TensorFlow's base
  classes (`_maybe_symbolic_build`);
- importing `keras.src`, `tensorflow.python` (or a private name from keras/tensorflow), and a
  string that names such a module (`sys.modules["keras.src.optimizers"]`).

A few underscore names are public API of the standard library and allowed everywhere.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import keras
import pytest
import tensorflow as tf

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("components", "pipelines", "models")
OWNER = REPO / "components" / "trainer" / "keras_private.py"
PRIVATE_MODULE = re.compile(r"^(keras\.src|tensorflow\.python|tf_keras\.src)(\.\w+)*$")
FRAMEWORKS = ("keras", "tensorflow", "tf_keras")
# Documented stdlib names: os._exit, namedtuple's _replace/_asdict/_fields/_make, and
# argparse's subparsers type (annotations only).
STDLIB_PUBLIC = {"_exit", "_replace", "_asdict", "_fields", "_make", "_SubParsersAction"}
ATTRIBUTE_FUNCTIONS = {"getattr", "hasattr", "setattr", "delattr"}
FRAMEWORK_BASES = (keras.Model, keras.layers.Layer, keras.callbacks.Callback,
                   keras.callbacks.TensorBoard, keras.optimizers.Optimizer,
                   keras.metrics.Metric, keras.losses.Loss, tf.Module)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the module binds itself: defs, classes, arguments, assignment targets."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            bound.add(node.attr)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
    return bound


def _framework_privates() -> set[str]:
    return {name for base in FRAMEWORK_BASES for name in dir(base) if _is_private(name)}


def private_uses(path: Path, framework_privates: set[str], root: Path = REPO) -> list[str]:
    """`file:line: what` for every private Keras/TF access in the module at `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = {name for name in _bound_names(tree) if _is_private(name)}
    where = path.relative_to(root)
    found = []

    def refuse(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            on_super = (isinstance(node.value, ast.Call)
                        and isinstance(node.value.func, ast.Name)
                        and node.value.func.id == "super")
            if on_super or (node.attr not in own and node.attr not in STDLIB_PUBLIC):
                refuse(node, f"reads private .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ATTRIBUTE_FUNCTIONS and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value) and node.args[1].value not in own):
            refuse(node, f"{node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and item.name in framework_privates):
                    refuse(item, f"overrides Keras/TF private {item.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if PRIVATE_MODULE.match(alias.name):
                    refuse(node, f"imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            if PRIVATE_MODULE.match(node.module) or any(PRIVATE_MODULE.match(n) for n in names):
                refuse(node, f"imports from {node.module}")
            elif node.module.split(".")[0] in FRAMEWORKS:
                for alias in node.names:
                    if _is_private(alias.name):
                        refuse(node, f"imports private {alias.name} from {node.module}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and PRIVATE_MODULE.match(node.value)):
            refuse(node, f"names the private module {node.value!r}")
    return found


def _scanned_files() -> list[Path]:
    files = [path for package in SCANNED for path in sorted((REPO / package).rglob("*.py"))]
    return [path for path in files if path != OWNER]


def test_keras_and_tensorflow_privates_are_reached_only_in_keras_private():
    framework_privates = _framework_privates()
    found = [use for path in _scanned_files() for use in private_uses(path, framework_privates)]
    assert not found, "Keras/TF private names outside keras_private.py:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_private_access_and_allows_the_modules_own(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "import os, sys\n"
        "import keras\n"
        "from tensorflow.python.eager import context\n"
        "class Model(keras.Model):\n"
        "    def _maybe_symbolic_build(self, iterator=None):\n"
        "        super()._maybe_symbolic_build(iterator)\n"
        "    def train_step(self, data):\n"
        "        self._loss_tracker.update_state(1.0)\n"
        "        self._own = getattr(data, '_keras_history')\n"
        "        return self._own, strategy.extended._in_multi_worker_mode()\n"
        "sys.modules.setdefault('keras.src.optimizers', None)\n"
        "os._exit(0)\n"
    )
    found = private_uses(source, _framework_privates(), root=tmp_path)
    assert sorted(found) == sorted([
        "example.py:3: imports from tensorflow.python.eager",
        "example.py:5: overrides Keras/TF private _maybe_symbolic_build",
        "example.py:6: reads private ._maybe_symbolic_build",
        "example.py:8: reads private ._loss_tracker",
        "example.py:9: getattr(..., '_keras_history')",
        "example.py:10: reads private ._in_multi_worker_mode",
        "example.py:11: names the private module 'keras.src.optimizers'",
    ])


def test_an_untested_keras_version_is_refused_in_one_line_naming_it():
    from components.trainer.keras_private import UntestedKerasError, check_keras_version

    check_keras_version(keras.__version__)  # the installed one is the tested one
    with pytest.raises(UntestedKerasError) as caught:
        check_keras_version("3.13.0")
    message = str(caught.value)
    assert "keras 3.13.0 is installed" in message and "\n" not in message
    with pytest.raises(UntestedKerasError):
        check_keras_version("3.1.2")  # a prefix of the tested 3.12 is not 3.12
