"""`mpijob-testbed load ARCHIVE`: its arguments, its one-line errors before any node is touched, and the
names it gives an image, with `ctr` replaced by a recorder (no cluster, no containerd here; the real import
runs in the real-node integration tests, which load their MPI and Horovod images through it)."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from mpijob_testbed import cli, load, nodeimages, processes, realnode
from mpijob_testbed.archives import normalize, read_archive
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import Layout

HANDLE = nodeimages.HANDLE
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _tar(path: Path, files: dict[str, Any]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, content in files.items():
            data = content if isinstance(content, bytes) else json.dumps(content).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def oci(path: Path, *manifests: dict[str, Any]) -> Path:
    # `tar -C dir -cf x .` (testbed/build-images.sh) writes ./-prefixed names.
    index = {"schemaVersion": 2, "manifests": list(manifests)}
    return _tar(path, {"./oci-layout": {"imageLayoutVersion": "1.0.0"}, "./index.json": index})


def ref(digest: str, **annotations: str) -> dict[str, Any]:
    keys = {"ref": "org.opencontainers.image.ref.name", "full": "io.containerd.image.name"}
    return {"digest": digest, "annotations": {keys[k]: v for k, v in annotations.items()}}


def unpacked(*names_digests: tuple[str, str]) -> str:
    """`ctr images import` output, as cmd/ctr/commands/images/import.go prints it."""
    return "".join(f"unpacking {n} ({d})...done\n" for n, d in names_digests)


class FakeCtr:
    def __init__(self, import_output: str) -> None:
        self.output = import_output
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, socket: Path, *args: str, check: bool = True, timeout: float = 120) -> str:
        self.calls.append((str(socket), *args))
        return self.output if args[:2] == ("images", "import") else ""

    def commands(self) -> list[tuple[str, ...]]:
        return [c[1:] for c in self.calls]


@pytest.fixture
def ctr(monkeypatch: pytest.MonkeyPatch) -> FakeCtr:
    fake = FakeCtr(unpacked((f"{HANDLE}:pause", D1), (f"{HANDLE}@{D1}", D1)))
    monkeypatch.setattr(nodeimages, "ctr", fake)
    return fake


def state_dir_with(root: Path, real: int, *, containerd_running: bool = True) -> Path:
    """A state directory as `up` leaves it: state.json, and each real node's containerd pid file."""
    root.mkdir(parents=True, exist_ok=True)
    nodes = [realnode.node_layout(Layout(root), i) for i in range(1, real + 1)]
    started = [{"name": n.name, "ip": n.ip} for n in nodes]
    state = {"version": 1, "real_node": started[0] if started else None, "real_nodes": started}
    (root / "state.json").write_text(json.dumps(state))
    for node in nodes if containerd_running else []:
        Layout(root).pid(node.component("containerd")).write_text(str(os.getpid()))
    return root


def _file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["load", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_parser_takes_the_archive_name_and_state_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(load, "load", lambda archive, **kw: calls.append((archive, kw["name"], kw["state_dir"])))
    assert cli.main(["load", "my.tar", "--name", "team/mpi:1", "--dir", "/tmp/tb"]) == 0
    assert cli.main(["load", "other.tar"]) == 0
    assert calls == [("my.tar", "team/mpi:1", "/tmp/tb"), ("other.tar", None, None)]
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["load"])  # the archive is required


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "absent.tar", "no such file"),
        (lambda d: d, "not a file"),
        (lambda d: _file(d / "notes.txt", b"hello\n"), "not a tar archive"),
        (lambda d: _file(d / "empty.tar", b""), "not a tar archive"),
        # ctr reads a plain tar stream only, so a gzipped `docker save` is refused here already.
        (
            lambda d: _file(d / "x.tar.gz", gzip.compress(oci(d / "x.tar", ref(D1, ref="a/b:1")).read_bytes())),
            "not a tar",
        ),
        (lambda d: _tar(d / "plain.tar", {"readme": b"hi"}), "not an image archive"),
        # Without oci-layout ctr does not read index.json (it looks for docker's manifest.json instead).
        (lambda d: _tar(d / "half.tar", {"index.json": {"manifests": [ref(D1, ref="a/b:1")]}}), "not an image archive"),
        (lambda d: oci(d / "empty.tar"), "holds no image"),
        (lambda d: oci(d / "tag.tar", ref(D1, ref="pause")), "names no image (only the tag pause)"),
        (lambda d: oci(d / "anon.tar", {"digest": D1}), "names no image (no name at all)"),
    ],
)
def test_a_bad_archive_is_one_line_naming_it_before_any_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ctr: FakeCtr, make: Any, message: str
) -> None:
    archive = make(tmp_path)
    code, _, err = run(capsys, str(archive), "--dir", str(state_dir_with(tmp_path / "tb", 1)))
    assert code == 1
    assert err.startswith(f"mpijob-testbed: {archive}") and message in err and err.count("\n") == 1, err
    assert ctr.calls == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--name", "Team/MPI:1"), "is not an image reference"),
        (("--name", "a b"), "is not an image reference"),
        (("--name", f"{HANDLE}:x"), "the testbed's own name"),
    ],
)
def test_a_bad_name_fails_before_any_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ctr: FakeCtr, args: tuple[str, ...], message: str
) -> None:
    archive = oci(tmp_path / "a.tar", ref(D1, ref="pause"))
    code, _, err = run(capsys, str(archive), *args, "--dir", str(state_dir_with(tmp_path / "tb", 1)))
    assert code == 1 and message in err and err.count("\n") == 1, err
    assert not [c for c in ctr.commands() if c[:2] == ("images", "import")]


def test_name_for_an_archive_of_two_images_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = oci(tmp_path / "two.tar", ref(D1, ref="a/b:1"), ref(D2, ref="a/c:1"))
    code, _, err = run(capsys, str(archive), "--name", "mine:1", "--dir", str(state_dir_with(tmp_path / "tb", 1)))
    assert code == 1 and "2 images in the archive; --name names exactly one" in err, err


def test_no_testbed_no_real_node_and_a_stopped_containerd_are_each_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ctr: FakeCtr
) -> None:
    archive = str(oci(tmp_path / "a.tar", ref(D1, ref="pause")))
    cases = [
        (tmp_path / "nothing-here", "no testbed at"),
        (state_dir_with(tmp_path / "kwok-only", 0), "has no real node"),
        (state_dir_with(tmp_path / "stopped", 2, containerd_running=False), "real-1's containerd is not running"),
    ]
    for state_dir, message in cases:
        code, _, err = run(capsys, archive, "--name", "mine:1", "--dir", str(state_dir))
        assert code == 1 and message in err and err.count("\n") == 1, (state_dir, err)
    assert ctr.calls == []


def test_the_state_directory_comes_from_the_environment_without_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MPIJOB_TESTBED_DIR", str(tmp_path / "from-env"))
    code, _, err = run(capsys, str(oci(tmp_path / "a.tar", ref(D1, ref="pause"))), "--name", "x:1")
    assert code == 1 and f"no testbed at {tmp_path / 'from-env'}" in err, err


def test_load_imports_into_every_real_node_under_the_name_and_says_how_long(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ctr: FakeCtr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "is_running", lambda pid, binary: binary == realnode.CONTAINERD)
    state_dir = state_dir_with(tmp_path / "tb", 2)
    archive = oci(tmp_path / "pause.tar", ref(D1, ref="pause"))
    code, out, _ = run(capsys, str(archive), "--name", "mine:1", "--dir", str(state_dir))
    assert code == 0
    sockets = [str(realnode.node_layout(Layout(state_dir), i).socket) for i in (1, 2)]
    assert [c[0] for c in ctr.calls if c[1:3] == ("images", "import")] == sockets
    assert ("images", "tag", "--force", f"{HANDLE}@{D1}", "docker.io/library/mine:1") in ctr.commands()
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["[testbed] real-1"] * 2 + ["[testbed] real-2"] * 2 + [
        "[testbed] loaded docker.io/library/mine"
    ]
    assert lines[1].endswith("s)") and " into 2 real node(s) in " in lines[-1]


def test_import_tags_from_the_handle_and_removes_the_handles(ctr: FakeCtr, tmp_path: Path) -> None:
    """The testbed's own images (umoci archives: the ref name is a tag only) get exactly the name asked for."""
    archive = read_archive(oci(tmp_path / "pause.tar", ref(D1, ref="pause")))
    names = nodeimages.import_archive(Path("/s"), archive, realnode.PAUSE_IMAGE)
    assert names == (realnode.PAUSE_IMAGE,)
    assert ctr.commands() == [
        ("images", "import", "--digests", "--base-name", HANDLE, str(archive.path)),
        ("images", "tag", "--force", f"{HANDLE}@{D1}", realnode.PAUSE_IMAGE),
        ("images", "rm", f"{HANDLE}:pause", f"{HANDLE}@{D1}"),
    ]


def test_without_name_the_archives_own_names_are_used_normalized(ctr: FakeCtr, tmp_path: Path) -> None:
    # Two images with full OCI ref names: ctr drops those (outside its base name), so each is tagged from the
    # handle with its own digest; the containerd annotation is kept by ctr itself, so it needs no tag.
    archive = read_archive(oci(tmp_path / "two.tar", ref(D1, ref="team/a:1"), ref(D2, full="docker.io/team/b:2")))
    ctr.output = unpacked(("docker.io/team/b:2", D2), (f"{HANDLE}@{D1}", D1), (f"{HANDLE}@{D2}", D2))
    names = nodeimages.import_archive(Path("/s"), archive)
    assert names == ("docker.io/team/a:1", "docker.io/team/b:2")
    tags = [c for c in ctr.commands() if c[1] == "tag"]
    assert tags == [("images", "tag", "--force", f"{HANDLE}@{D1}", "docker.io/team/a:1")]


def test_a_docker_save_archive_keeps_its_repo_tags(ctr: FakeCtr, tmp_path: Path) -> None:
    path = _tar(tmp_path / "saved.tar", {"manifest.json": [{"Config": "c.json", "RepoTags": ["mpi:1", "me/mpi:1"]}]})
    archive = read_archive(path)
    assert (archive.format, archive.images) == ("docker", 1)
    assert archive.names == ("docker.io/library/mpi:1", "docker.io/me/mpi:1")
    ctr.output = unpacked(("docker.io/library/mpi:1", D1), ("docker.io/me/mpi:1", D1), (f"{HANDLE}@{D1}", D1))
    assert nodeimages.import_archive(Path("/s"), archive) == archive.names
    assert not [c for c in ctr.commands() if c[1] == "tag"]


def test_an_import_that_made_no_handle_is_an_error(ctr: FakeCtr, tmp_path: Path) -> None:
    ctr.output = "unpacking something else...\n"
    with pytest.raises(TestbedError, match="ctr imported no image"):
        nodeimages.import_archive(Path("/s"), read_archive(oci(tmp_path / "a.tar", ref(D1, ref="p"))), "x:1")


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("mine:1", "docker.io/library/mine:1"),
        ("team/mpi", "docker.io/team/mpi:latest"),
        ("localhost:5000/mpi:2", "localhost:5000/mpi:2"),
        ("localhost/mpi", "localhost/mpi:latest"),
        (realnode.PAUSE_IMAGE, realnode.PAUSE_IMAGE),
        (f"registry.example/a/b:1@{D1}", f"registry.example/a/b@{D1}"),
    ],
)
def test_names_are_normalized_as_the_kubelet_looks_them_up(given: str, normalized: str) -> None:
    assert normalize(given) == normalized


@pytest.mark.parametrize("bad", ["", "Mine:1", "a b", "mine:1\n", "team/MPI", "x:", "a//b", "-a"])
def test_what_is_not_a_reference_is_refused(bad: str) -> None:
    with pytest.raises(TestbedError, match="not an image reference"):
        normalize(bad)
