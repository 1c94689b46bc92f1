"""What an image archive holds, read before any node is touched: OCI layouts (`index.json`) and `docker save`
output (`manifest.json`), as `ctr images import` (containerd 1.6/1.7) reads them, so a bad archive is one
clear error instead of a `ctr` failure on the first node. Also the reference normalization the kubelet's
image lookups use (`mine:1` is `docker.io/library/mine:1` to the CRI), so a name given here matches a pod's."""

from __future__ import annotations

import json
import posixpath
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpijob_testbed.errors import TestbedError

# containerd's own annotation (full name, used verbatim) and OCI's (often a tag only, as umoci writes it).
IMAGE_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"

# The testbed's private base name for images being imported (nodeimages.py); never a name it gives one.
HANDLE = "mpijob.local/importing"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)


@dataclass(frozen=True)
class Entry:
    """One top-level image of the archive: its manifest digest (OCI; containerd computes Docker's on import)
    and the full names it states, normalized."""

    digest: str | None
    names: tuple[str, ...]
    tags: tuple[str, ...] = ()  # OCI ref names without a repository (`pause`): not a name on their own


@dataclass(frozen=True)
class Archive:
    path: Path
    format: str  # "oci" or "docker"
    entries: tuple[Entry, ...]

    @property
    def images(self) -> int:
        """Distinct images (two tags of one manifest are one image)."""
        return len({e.digest for e in self.entries}) if self.format == "oci" else len(self.entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for e in self.entries for n in e.names))


def normalize(reference: str) -> str:
    """The reference as the CRI looks it up (Docker's ParseDockerRef): default domain and `library/`,
    `:latest` when neither tag nor digest is given, the digest alone when both are."""
    m = _REFERENCE.fullmatch(reference)
    if m is None:
        raise TestbedError(f"{reference!r} is not an image reference (like registry.example/team/mpi:1.0)")
    domain, path = m["domain"], m["path"]
    # Docker's rule: the first component is a domain only with a dot or a port, or as localhost (`team/mpi`
    # is docker.io/team/mpi); as a path component it must be lowercase like the others.
    if domain is not None and not ("." in domain or ":" in domain or domain == "localhost"):
        if not re.fullmatch(_COMPONENT, domain):
            raise TestbedError(f"{reference!r} is not an image reference (repository names are lowercase)")
        domain, path = None, f"{domain}/{path}"
    domain = domain or "docker.io"
    if domain == "docker.io" and "/" not in path:
        path = f"library/{path}"
    if m["digest"]:
        return f"{domain}/{path}@{m['digest']}"
    return f"{domain}/{path}:{m['tag'] or 'latest'}"


def read_archive(path: Path) -> Archive:
    """The archive's images and names; TestbedError when it is missing, not a plain tar, or no image archive."""
    if not path.exists():
        raise TestbedError(f"{path}: no such file")
    if not path.is_file():
        raise TestbedError(f"{path}: not a file")
    try:
        with tarfile.open(path, "r:") as tar:
            members = {posixpath.normpath(m.name): m for m in tar.getmembers() if m.isfile()}
            files = {
                n: _json(tar, members[n], path) for n in ("oci-layout", "index.json", "manifest.json") if n in members
            }
    except tarfile.TarError as exc:
        # ctr reads a plain tar stream only: a gzipped `docker save` fails there too.
        raise TestbedError(f"{path}: not a tar archive ({exc}; compressed? gunzip it first)") from exc
    if "oci-layout" in files and "index.json" in files:
        entries = tuple(_oci_entry(m) for m in files["index.json"].get("manifests") or [])
        archive = Archive(path, "oci", entries)
    elif "manifest.json" in files:
        manifests = files["manifest.json"] if isinstance(files["manifest.json"], list) else []
        entries = tuple(Entry(None, tuple(normalize(t) for t in m.get("RepoTags") or [])) for m in manifests)
        archive = Archive(path, "docker", entries)
    else:
        raise TestbedError(f"{path}: not an image archive (no oci-layout and index.json, no manifest.json)")
    if not archive.entries:
        raise TestbedError(f"{path}: the archive holds no image")
    return archive


def _json(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> Any:
    f = tar.extractfile(member)
    try:
        return json.loads(f.read() if f else b"")
    except ValueError as exc:
        raise TestbedError(f"{path}: {member.name} is not JSON ({exc})") from exc


def _oci_entry(manifest: dict[str, Any]) -> Entry:
    annotations = manifest.get("annotations") or {}
    full, ref = annotations.get(IMAGE_NAME), annotations.get(REF_NAME)
    digest = str(manifest.get("digest") or "")
    if full:
        return Entry(digest, (normalize(full),))
    # containerd's rule (images/archive/reference.go): a ref name with "/", ":" or "@" is a full reference.
    if ref and any(c in ref for c in "/:@"):
        return Entry(digest, (normalize(ref),))
    return Entry(digest, (), (ref,) if ref else ())


def targets(archive: Archive, name: str | None) -> tuple[str, ...]:
    """The names the archive's image(s) get on a node: `name` (normalized) for its one image, or the names
    the archive states; TestbedError when `name` would be ambiguous or there is no name at all."""
    if name is not None:
        if archive.images != 1:
            raise TestbedError(f"{archive.path}: {archive.images} images in the archive; --name names exactly one")
        wanted = normalize(name)
        if wanted.startswith(HANDLE):
            raise TestbedError(f"{HANDLE} is the testbed's own name for images being imported; choose another")
        return (wanted,)
    if not archive.names:
        tags = [t for e in archive.entries for t in e.tags]
        stated = f"only the tag {', '.join(tags)}" if tags else "no name at all"
        raise TestbedError(f"{archive.path}: the archive names no image ({stated}); give one with --name IMAGE")
    return archive.names
