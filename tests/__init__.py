"""mptfx's tests. A regular package, so `tests.<helper>` always means these files: once
IPython is imported (TFMA does), its extensions folder, with a `tests` package of its own,
is on sys.path too."""
