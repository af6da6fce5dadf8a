"""Developer tools run from the checkout; not installed, not in the image."""
