"""Which storage a store URL opens: the local fast paths for ``file://``, fsspec for the rest."""

from __future__ import annotations

from typing import Any

from nodus.errors import UsageError, note_url
from nodus.store.storage import Storage

__all__ = ["open_storage"]


def open_storage(url: str, **storage_options: Any) -> Storage:
    """The storage of a store URL (``file://``, ``memory://``, ``s3://``, … or an absolute path).

    ``storage_options`` go to fsspec (for example ``endpoint_url`` of an S3-compatible server).
    """
    from nodus.store.local_storage import LocalStorage

    note_url(url)  # its password is masked in every message (docs/security.md)
    if url.startswith("/"):  # a bare absolute path means a file:// store
        url = "file://" + url
    if "://" not in url:
        raise UsageError(f"store URL {url!r}: give file:///abs/path, s3://bucket/prefix, ...")
    url = url.rstrip("/")
    local = url[len("file://") :] if url.startswith("file://") else ""
    if url.startswith("file://") and not local.startswith("/"):
        # fsspec would take `file://rel/store` relative to the current folder: another store
        # in every folder a command runs from.
        raise UsageError(
            f"store URL {url!r}: a file:// store takes an absolute path (file:///abs/path)"
        )
    if local.startswith("/") and not storage_options:
        # The usual store needs no fsspec, whose import alone is a tenth of a `nodus run`.
        return LocalStorage(url, local)

    from fsspec.core import url_to_fs

    from nodus.store._faults import throttled
    from nodus.store.fsspec_storage import FsspecStorage

    try:
        fs, root = url_to_fs(url, **storage_options)
    except (ImportError, ValueError) as error:
        raise UsageError(f"store URL {url!r}: {error}") from error
    except OSError as error:  # a protocol that connects when it is opened (ftp, sftp, …)
        why = error.strerror or error
        raise UsageError(f"store URL {url!r}: cannot reach it ({why})") from None
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if "file" in protocols:
        return LocalStorage(url, root.rstrip("/"))
    return throttled(FsspecStorage(url, fs, root.rstrip("/")))
