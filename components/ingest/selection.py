"""What one run ingests, decided once: the data root, its spans, and the one listing.

    selection = select_data("/data/digits", window=2)       # spans.py: the one listing
    selection = stage_listing(selection, pipeline_root)     # the listing file, by its hash
    ImageExampleGen(data_selection=selection.parameter())   # a few hundred bytes
    load_selection(parameter)                               # in the Ingest: nothing re-listed

`pipelines/data_source.py` `resolve_data` builds it; the pipeline hands it to the Ingest as
one JSON parameter. The listing itself (20,000 photos: about 1.4 MB of JSON) is not in the
parameter, which ML Metadata stores with every execution, cached ones included: it is a file
in the pipeline root named by the sha256 of its content, so the parameter changes exactly
when the listing does (TFX's cache re-ingests exactly then) and every runner's Ingest, in
this process or in its own pod, reads the file from the pipeline root it already mounts.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from components.ingest.errors import DataError
from components.ingest.listing import ListedFile, Listing, SourceKind, list_data

LISTINGS_DIR = "data_listings"
_LISTING_SUFFIX = ".json.gz"


@dataclass(frozen=True)
class DataSelection:
    """What one run ingests: `root`, and below it the span folders (none: `root` itself),
    with the one listing of their files (`listing.py`; empty: not listed)."""

    root: str
    span_dirs: list[str] = field(default_factory=list)
    span: int = 0
    spans: list[int] = field(default_factory=list)
    listing: Listing = field(default_factory=Listing)
    # Where `stage_listing` stored the listing ("" not stored: the Ingest refuses it).
    listing_uri: str = ""

    @property
    def kind(self) -> SourceKind:
        """"images" (class folders), "tfrecords" or "volumes": what the Ingest reads, and
        what `model.name: auto` reads before it to lay out the pipeline."""
        return self.listing.kind

    @property
    def fingerprint(self) -> str:
        """The listing's digest (`Listing.fingerprint`): the Examples' `input_fingerprint`."""
        return self.listing.fingerprint

    @property
    def folders(self) -> list[str]:
        """The folders whose files are ingested."""
        return [os.path.join(self.root, d) for d in self.span_dirs] or [self.root]

    def parameter(self) -> str:
        """The Ingest's `data_selection` parameter: everything but the files, and the
        listing file that holds them."""
        return json.dumps({"root": self.root, "span_dirs": self.span_dirs, "span": self.span,
                           "spans": self.spans, "kind": self.kind,
                           "listing": self.listing_uri}, sort_keys=True)


def select_folder(root: str | os.PathLike, span_dirs: Sequence[str] = ()) -> DataSelection:
    """A folder (or its `span_dirs`), listed: what `ingest()` reads when given a path.

    Raises:
        DataError: see `list_data`.
    """
    return DataSelection(str(Path(root)), span_dirs=list(span_dirs),
                         listing=list_data(root, span_dirs))


def _listing_bytes(listing: Listing) -> bytes:
    body = {"kind": listing.kind, "label_names": list(listing.label_names),
            "files": [list(listed) for listed in listing.files]}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")


def stage_listing(selection: DataSelection, pipeline_root: str | os.PathLike) -> DataSelection:
    """Store the listing as `<pipeline_root>/data_listings/<sha256>.json.gz` (kept when
    there) and return the selection naming it. A listing nobody made (no files) is not
    stored.

    Raises:
        OSError: the pipeline root cannot be written.
    """
    if not selection.listing.files:
        return selection
    body = _listing_bytes(selection.listing)
    path = Path(pipeline_root) / LISTINGS_DIR / f"{hashlib.sha256(body).hexdigest()}" \
        f"{_LISTING_SUFFIX}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written under a temporary name and renamed, so no reader sees half a listing.
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_bytes(gzip.compress(body, mtime=0))
        os.replace(partial, path)
    return dataclasses.replace(selection, listing_uri=str(path))


def _read_listing(uri: str) -> Listing:
    if not uri:
        raise DataError("the Ingest was given no data listing: the pipeline was compiled "
                        "with a stand-in for data not reachable there (mptfx k8s compile); "
                        "mptfx k8s submit lists the data where its driver runs")
    try:
        body = gzip.decompress(Path(uri).read_bytes())
    except (OSError, EOFError) as error:
        raise DataError(f"cannot read the data listing {uri}: "
                        f"{getattr(error, 'strerror', None) or error}; run the pipeline "
                        "again to list the data anew") from None
    if f"{hashlib.sha256(body).hexdigest()}{_LISTING_SUFFIX}" != os.path.basename(uri):
        raise DataError(f"the data listing {uri} changed after it was written; run the "
                        "pipeline again to list the data anew")
    fields = json.loads(body)
    return Listing(fields["kind"], tuple(ListedFile(*row) for row in fields["files"]),
                   tuple(fields["label_names"]))


def load_selection(parameter: str) -> DataSelection:
    """The selection `DataSelection.parameter()` describes, its listing read back from the
    file (checked against its hash); nothing is listed again.

    Raises:
        DataError: the listing file is missing, unreadable or changed.
    """
    fields = json.loads(parameter)
    listing = _read_listing(fields["listing"])
    return DataSelection(root=fields["root"], span_dirs=list(fields["span_dirs"]),
                         span=int(fields["span"]), spans=list(fields["spans"]),
                         listing=listing, listing_uri=fields["listing"])
