"""Getting one public file, checked: downloaded with resume, or taken from a local copy.

A `RemoteFile` names a file by its official address, with the size and SHA-256 recorded for
it when they are known. `Fetcher.get(remote)` returns a local path to a copy whose size and
checksum have been verified:

- downloaded over HTTP(S) into `NAME.part` in the downloads folder, resumed with a `Range`
  request when a `.part` is already there, checked, then renamed to `NAME` (so a file under its
  own name is always a complete, checked one, and a second run uses it without downloading);
  a download that fails says whether bytes were kept in a `.part` (none is left empty);
- or, with `local` (the command line's `--from`), taken from a folder holding the files under
  their names (or their address's path, e.g. `val2017/000000000139.jpg`), or from one file that
  stands for the dataset's main archive; nothing is then downloaded.

A wrong size or checksum is a `DataError` naming the file, what was expected and what was got.
`overrides` ({name: sha256}) replace the recorded checks for a copy the user trusts (a newer
upload of the same data, say): the file must then have that SHA-256, whatever its size.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tqdm import tqdm

from common.errors import DataError, UserError

CHUNK = 1 << 20
TIMEOUT_S = 60


@dataclass(frozen=True)
class RemoteFile:
    """A file at its official address.

    Args:
        url: where it is published.
        size: its size in bytes, or None when not recorded.
        sha256: its SHA-256 (hex), or None when not recorded.
    """

    url: str
    size: int | None = None
    sha256: str | None = None

    @property
    def name(self) -> str:
        """The file's name: the last part of its address."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def path(self) -> str:
        """The address's path without its leading slash (`zips/val2017.zip`)."""
        return urlsplit(self.url).path.lstrip("/")


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def parse_sha256_overrides(values: list[str] | None, default_name: str) -> dict[str, str]:
    """`--sha256` values (`HEX` for the main archive, or `NAME=HEX`) as {name: hex}."""
    overrides = {}
    for value in values or []:
        name, _, digest = value.rpartition("=")
        digest = digest.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise UserError(f"--sha256 {value!r}: expected 64 hex digits, or NAME=64 hex digits")
        overrides[name or default_name] = digest
    return overrides


class Fetcher:
    """Finds or downloads `RemoteFile`s and checks them.

    Args:
        downloads: the folder downloads go to (created when needed).
        local: a folder of local copies, or one file standing for `archive_name`; None
            downloads.
        archive_name: the name of the dataset's main archive (what a `local` file stands for).
        overrides: {file name: sha256} replacing the recorded size and checksum.
        progress: show a progress bar on a terminal.
    """

    def __init__(self, downloads: Path, local: Path | None = None, archive_name: str = "",
                 overrides: dict[str, str] | None = None, progress: bool = True):
        self.downloads = Path(downloads)
        self.local = None if local is None else Path(local)
        self.archive_name = archive_name
        self.overrides = dict(overrides or {})
        self.progress = progress
        self.checked: dict[str, str] = {}  # file name -> the SHA-256 it was checked with
        if self.local is not None and not self.local.exists():
            raise UserError(f"--from {self.local}: no such file or folder")

    def get(self, remote: RemoteFile, into: Path | None = None, checked: bool = True) -> Path:
        """A verified local copy of `remote`.

        Args:
            remote: the file.
            into: where a download goes (default: the downloads folder). Local copies are used
                where they are, except that with `into` they are copied there.
            checked: verify size and checksum (False for files with nothing recorded, which
                the caller checks its own way, such as single COCO images).

        Raises:
            DataError: the file is not in `local`, cannot be downloaded, or fails its check.
        """
        if self.local is not None:
            path = self._local_copy(remote)
            if checked:
                self._verify(remote, path, downloaded=False)
            if into is not None:
                into.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, into / remote.name)
                path = into / remote.name
            return path
        folder = self.downloads if into is None else into
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / remote.name
        if final.is_file():
            if checked:
                self._verify(remote, final, downloaded=False)
            return final
        part = folder / f"{remote.name}.part"
        self._download(remote, part)
        if checked:
            self._verify(remote, part, downloaded=True)
        os.replace(part, final)
        return final

    def _local_copy(self, remote: RemoteFile) -> Path:
        assert self.local is not None
        if self.local.is_file():
            if remote.name in (self.local.name, self.archive_name):
                return self.local
            raise DataError(f"--from {self.local} is one file, standing for {self.archive_name}; "
                            f"{remote.name} is needed too: give a folder holding both")
        for candidate in (self.local / remote.name, self.local / remote.path):
            if candidate.is_file():
                return candidate
        raise DataError(f"--from {self.local}: no {remote.name} in it (nor {remote.path}); "
                        f"it is published at {remote.url}")

    def _expected(self, remote: RemoteFile) -> tuple[int | None, str | None]:
        if remote.name in self.overrides:
            return None, self.overrides[remote.name]
        return remote.size, remote.sha256

    def _verify(self, remote: RemoteFile, path: Path, downloaded: bool) -> None:
        size, digest = self._expected(remote)
        got_size = path.stat().st_size
        problem = None
        if size is not None and got_size != size:
            problem = f"size {got_size:,} bytes, expected {size:,}"
        else:
            got = sha256_of(path)
            if digest is not None and got != digest:
                problem = f"SHA-256 {got}, expected {digest}"
            else:
                self.checked[remote.name] = got
        if problem is None:
            return
        if downloaded:
            path.unlink()
            hint = "the download was removed; run again to download it anew"
        elif self.local is None:
            hint = "delete it to download it anew"
        else:
            hint = "a different or damaged copy; pass --sha256 NAME=HEX for a copy you trust"
        raise DataError(f"{path}: {problem} ({remote.name} from {remote.url}; {hint})")

    def _download(self, remote: RemoteFile, part: Path) -> None:
        start = part.stat().st_size if part.is_file() else 0
        size, _ = self._expected(remote)
        if size is not None and start >= size:
            if start == size:
                return  # complete already; checked next
            part.unlink()
            start = 0
        headers = {"Range": f"bytes={start}-"} if start else {}
        request = urllib.request.Request(remote.url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                if start and getattr(response, "status", 200) != 206:
                    start = 0  # the server sent the whole file: start over
                length = response.headers.get("Content-Length")
                total = (start + int(length) if length and length.isascii() and length.isdigit()
                         else size)
                with open(part, "ab" if start else "wb") as f, tqdm(
                    total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=remote.name, disable=None if self.progress else True, leave=False,
                ) as bar:
                    while chunk := response.read(CHUNK):
                        f.write(chunk)
                        bar.update(len(chunk))
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if part.is_file() and part.stat().st_size == 0:
                part.unlink()  # opened, nothing written: no file to resume from
            if part.is_file():
                kept = (f"the {part.stat().st_size:,} bytes received are kept in {part} and "
                        "resumed next time")
            else:
                kept = "nothing was received; check the connection and run again"
            raise DataError(f"{remote.url}: download failed ({reason}); {kept}, or use --from "
                            "with a local copy") from None
