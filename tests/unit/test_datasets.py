"""The built-in digits export: real images in the layout a user's own data has."""

from PIL import Image

from components.ingest.builtin_digits import export_digits


def test_exports_one_folder_per_class_of_8x8_grayscale_pngs(tmp_path):
    root = export_digits(tmp_path / "digits")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert classes == [str(d) for d in range(10)]
    files = list(root.glob("*/*.png"))
    assert len(files) == 1797
    with Image.open(files[0]) as image:
        assert image.size == (8, 8) and image.mode == "L"
        assert max(image.getdata()) > 200  # 0..16 stretched to 0..255


def test_subset_and_reuse(tmp_path):
    root = export_digits(tmp_path / "digits", per_class=5)
    assert len(list(root.glob("*/*.png"))) == 50
    stamp = (root / "3").stat().st_mtime_ns
    assert export_digits(tmp_path / "digits", per_class=5) == root
    assert (root / "3").stat().st_mtime_ns == stamp  # not rewritten
    export_digits(tmp_path / "digits", per_class=7)
    assert len(list(root.glob("*/*.png"))) == 70
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".digits-")]
