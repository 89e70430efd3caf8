"""Fetching raw dataset files from the registry's sources, on loopback only (a real HTTP server on 127.0.0.1, and
``HF_ENDPOINT`` pointed at it for the Hugging Face path): sources in order, resume, verification, timeouts, locking,
the manual route (issue 43 items 2 and 3)."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import time

import pytest
import raw_fixtures
from conftest import ROOT
from loopback import Loopback, entry, http, hub, registry

from disentangle.data import download as dl
from disentangle.data.convert import is_complete
from disentangle.data.download import DownloadError, fetch_file, take_file, verify_file
from disentangle.data.integrity import git_blob_sha1_of, sampled_sha256, seal_path
from disentangle.data.preparation import check, prepare, source_keys, take
from disentangle.data.sources import load_sources
from disentangle.errors import DatasetDamagedError

pytestmark = pytest.mark.filterwarnings("ignore:.*factor sizes .* differ from the official:UserWarning")

PAYLOAD = random.Random(0).randbytes(3 << 20)  # 3 MiB: several chunks, so a cut lands mid-transfer
SHA = hashlib.sha256(PAYLOAD).hexdigest()
TIMEOUT = 5.0


@pytest.fixture
def server():
    with Loopback() as s:
        yield s


def _files(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name not in (".huggingface", ".locks")) if root.exists() else []


def _fetch(e, root, lines=None, timeout=TIMEOUT):
    return fetch_file(e, root, progress=False, timeout=timeout, log=(lines.append if lines is not None else print))


def test_a_dead_primary_falls_through_to_the_mirror(server, tmp_path):
    server.files["/mirror/raw.bin"] = PAYLOAD
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/gone/raw.bin"), http(f"{server.base}/mirror/raw.bin")],
                           data=PAYLOAD))
    lines = []
    path = _fetch(reg["k"], tmp_path, lines)
    assert path.read_bytes() == PAYLOAD and _files(tmp_path) == ["raw.bin"]
    assert [p for m, p, _ in server.log] == ["/gone/raw.bin", "/mirror/raw.bin"]
    assert len(lines) == 1 and "404" in lines[0] and "trying the next source" in lines[0]
    # there already: verified, nothing fetched
    assert _fetch(reg["k"], tmp_path) == path and len(server.log) == 2


def test_a_cut_transfer_resumes_with_a_range_request(server, tmp_path):
    server.files["/raw.bin"] = PAYLOAD
    server.mode["/raw.bin"] = "drop_once"
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD))
    lines = []
    path = _fetch(reg["k"], tmp_path, lines)
    assert path.read_bytes() == PAYLOAD
    first, second = server.gets("/raw.bin")  # the server's log shows the Range request
    start = int(second.removeprefix("bytes=").removesuffix("-"))
    assert first is None and len(PAYLOAD) // 4 < start <= len(PAYLOAD) // 2  # what arrived before the cut is kept
    assert any(f"resuming raw.bin at byte {start} of {len(PAYLOAD)}" in line for line in lines)


def test_a_part_left_by_an_interrupted_run_is_resumed_not_restarted(server, tmp_path):
    server.files["/raw.bin"] = PAYLOAD
    (tmp_path / "raw.bin.part").write_bytes(PAYLOAD[:1000])
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD))
    assert _fetch(reg["k"], tmp_path).read_bytes() == PAYLOAD
    assert server.gets("/raw.bin") == ["bytes=1000-"]


def test_a_server_that_ignores_range_restarts_cleanly(server, tmp_path):
    server.files["/raw.bin"] = PAYLOAD
    server.mode["/raw.bin"] = "ignore_range"
    (tmp_path / "raw.bin.part").write_bytes(b"x" * 1000)
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD))
    assert _fetch(reg["k"], tmp_path).read_bytes() == PAYLOAD


@pytest.mark.parametrize("published", ["sha256", "size"])
def test_wrong_bytes_are_refused_and_no_file_appears(server, tmp_path, published):
    wrong = bytearray(PAYLOAD)
    wrong[12345] ^= 0xFF
    server.files["/raw.bin"] = bytes(wrong) if published == "sha256" else PAYLOAD[:-1]
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD))
    with pytest.raises(DownloadError) as info:
        _fetch(reg["k"], tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "could not download raw.bin" in msg and "wrong bytes" in msg
    assert (SHA if published == "sha256" else f"not the published {len(PAYLOAD)}") in msg
    # the manual route: URL, size, sha256, where to put it
    assert f"{server.base}/raw.bin ({len(PAYLOAD)} bytes, sha256 {SHA})" in msg
    assert "--from-file PATH" in msg and str(tmp_path / "raw.bin") in msg
    assert _files(tmp_path) == []  # no final file, no part


def test_a_stalled_server_times_out_in_the_configured_seconds(server, tmp_path):
    server.files["/raw.bin"] = PAYLOAD
    server.mode["/raw.bin"] = "stall"
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD))
    start = time.perf_counter()
    with pytest.raises(DownloadError) as info:
        _fetch(reg["k"], tmp_path, timeout=1.0)
    elapsed = time.perf_counter() - start
    assert elapsed < 4.0, f"took {elapsed:.1f} s for a 1 s timeout"
    msg = str(info.value)
    assert "\n" not in msg and "timed out" in msg and "1 s" in msg
    assert len(server.gets("/raw.bin")) == 1  # a stall is not retried
    assert not (tmp_path / "raw.bin").exists()


def test_every_source_failing_names_each_with_its_error(server, tmp_path):
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/a/raw.bin"), http("http://127.0.0.1:9/raw.bin")],
                           data=PAYLOAD))
    with pytest.raises(DownloadError) as info:
        _fetch(reg["k"], tmp_path, [])
    msg = str(info.value)
    assert "\n" not in msg
    assert f"1. {server.base}/a/raw.bin: HTTPError: 404" in msg and "2. http://127.0.0.1:9/raw.bin: ConnectionError" in msg


def test_the_hub_path_goes_through_huggingface_hub_at_hf_endpoint(server, tmp_path, monkeypatch):
    hub_path = "/datasets/owner/mpi3d/resolve/main/mpi3d_toy.npz"
    server.files[hub_path] = PAYLOAD
    monkeypatch.setenv("HF_ENDPOINT", server.base)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    reg = registry(k=entry("mpi3d_toy.npz", [hub("owner/mpi3d", "mpi3d_toy.npz"), http(f"{server.base}/never")],
                           data=PAYLOAD, dataset="mpi3d", variant="toy"))
    path = _fetch(reg["k"], tmp_path)
    assert path == tmp_path / "mpi3d_toy.npz" and path.read_bytes() == PAYLOAD
    assert ("HEAD", hub_path, None) in server.log and server.gets(hub_path)
    assert not any(p == "/never" for _, p, _ in server.log)
    # a Hub file with the wrong bytes is refused like any other
    server.files[hub_path] = PAYLOAD[::-1]
    path.unlink()
    with pytest.raises(DownloadError, match="wrong bytes"):
        _fetch(registry(k=entry("mpi3d_toy.npz", [hub("owner/mpi3d", "mpi3d_toy.npz")], data=PAYLOAD,
                                dataset="mpi3d", variant="toy"))["k"], tmp_path)
    assert not path.exists()


def test_an_unpublished_hash_is_recorded_in_one_line_then_enforced(server, tmp_path):
    server.files["/raw.bin"] = PAYLOAD
    reg = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD, publish=False))
    lines = []
    path = _fetch(reg["k"], tmp_path, lines)
    assert len(lines) == 1 and "no published sha256" in lines[0] and SHA in lines[0]
    assert (tmp_path / "raw.bin.sha256").read_text().split() == [SHA, "raw.bin"]
    lines.clear()
    _fetch(reg["k"], tmp_path, lines)
    assert lines == [] and len(server.gets("/raw.bin")) == 1
    damaged = bytearray(PAYLOAD)
    damaged[7] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(DownloadError, match="recorded at its first download"):
        verify_file(reg["k"], path)


def test_the_owners_git_blob_id_is_checked(server, tmp_path):
    """dSprites publishes no sha256, but its owners' git tree pins the file's blob id: that is enforced."""
    (tmp_path / "src").mkdir()
    good = tmp_path / "src" / "d.npz"
    good.write_bytes(PAYLOAD)
    raw = entry("d.npz", [http(f"{server.base}/d.npz")], data=PAYLOAD, publish=False)
    raw.update(git_blob_sha1=git_blob_sha1_of(good), git_blob_sha1_cited_by="tests/loopback@0000000:x")
    reg = registry(k=raw)
    server.files["/d.npz"] = PAYLOAD[:-10] + b"0123456789"
    with pytest.raises(DownloadError, match="git blob id"):
        _fetch(reg["k"], tmp_path / "root")
    server.files["/d.npz"] = PAYLOAD
    lines = []
    _fetch(reg["k"], tmp_path / "root", lines)
    assert "its git blob id matches the owners'" in lines[0]


def test_an_owners_md5_is_checked_where_the_registry_enforces_it(server, tmp_path):
    """The causal chamber publishes only an md5 for its zip, and the registry marks it enforced: a different file is
    refused even though no sha256 or size is published."""
    package = load_sources()["causalchamber_photos"]
    assert package.md5_enforced and package.md5 == "8ec492afffd0142abd70b1fa7082b104" and package.sha256 is None
    raw = entry("lt_crl_benchmark_v1.zip", [http(f"{server.base}/z.zip")], data=PAYLOAD, publish=False,
                dataset="causalchamber_photos")
    raw.update(md5=hashlib.md5(PAYLOAD).hexdigest(), md5_cited_by="tests/loopback@0000000:x", md5_enforced=True)
    e = registry(k=raw)["k"]
    server.files["/z.zip"] = PAYLOAD[::-1]
    with pytest.raises(DownloadError, match="its md5 is .*, not the owners'"):
        _fetch(e, tmp_path)
    server.files["/z.zip"] = PAYLOAD
    lines = []
    _fetch(e, tmp_path, lines)
    assert "its md5 matches the owners'" in lines[0]


def test_from_file_verifies_and_places_a_hand_download(tmp_path):
    reg = registry(k=entry("raw.bin", [http("http://127.0.0.1:9/raw.bin")], data=PAYLOAD))
    bad = tmp_path / "Downloads" / "raw (1).bin"
    bad.parent.mkdir()
    bad.write_bytes(PAYLOAD[:-1] + b"!")
    with pytest.raises(DownloadError, match=r"--from-file .* is not raw.bin of data=shapes3d: its sha256"):
        take_file(reg["k"], bad, tmp_path / "root", log=print)
    assert not (tmp_path / "root" / "raw.bin").exists()
    bad.write_bytes(PAYLOAD)
    placed = take_file(reg["k"], bad, tmp_path / "root", log=print)
    assert placed == tmp_path / "root" / "raw.bin" and placed.read_bytes() == PAYLOAD and bad.exists()


def _serve_official(server, key: str, e, tmp_path):
    """Write the fake official file of registry entry ``e`` and serve it; return (bytes, the source dict)."""
    src = tmp_path / "official"
    name = e.dataset
    kwargs = {"archive": True} if name in ("falcor3d", "isaac3d", "cars3d") else {}
    if name == "mpi3d":
        kwargs["variant"] = e.variant
    if not (src / e.filename).exists():
        raw_fixtures.WRITERS[name](src, **kwargs)
    data = (src / e.filename).read_bytes()
    if e.sources[0].kind == "hf":  # the owners' current location is on the Hub: keep that path
        path = f"/datasets/{e.sources[0].repo_id}/resolve/main/{e.sources[0].hf_filename}"
        source = hub(e.sources[0].repo_id, e.sources[0].hf_filename)
    else:
        path = f"/{key}/{e.filename}"
        source = http(server.base + path)
    server.files[path] = data
    return data, source, path


GROUPS = {"mpi3d": ["mpi3d", "mpi3d_toy", "mpi3d_realistic", "mpi3d_real"]}


@pytest.mark.parametrize("dataset", ["shapes3d", "dsprites", "mpi3d", "falcor3d", "isaac3d", "cars3d", "smallnorb",
                                     "causalchamber_photos"])
def test_every_registry_file_is_fetched_verified_and_converted(server, tmp_path, monkeypatch, dataset):
    """Every file of the package's registry, in its dataset's official format, served on loopback with a dead
    primary in front of it: fetched once, verified, converted into a sealed cache."""
    monkeypatch.setenv("HF_ENDPOINT", server.base)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    package = load_sources()
    assert dataset in {e.dataset for e in package.values()}
    for key in GROUPS.get(dataset, [dataset]):
        e = package.get(key)
        variant = e.variant if e is not None else None
        keys = source_keys(dataset, variant)
        entries, paths = {}, []
        for k in keys:
            data, source, path = _serve_official(server, k, package[k], tmp_path)
            entries[k] = entry(package[k].filename, [http(f"{server.base}/dead/{k}"), source], data=data,
                               dataset=dataset, variant=variant)
            paths.append(path)
        root = tmp_path / "root"
        sizes = {"mpi3d": list(raw_fixtures.MPI3D_SIZES),
                 "causalchamber_photos": list(raw_fixtures.PHOTOS_SIZES)}.get(dataset)
        cache = prepare(dataset, root, variant=None if variant == "complex" else variant, factor_sizes=sizes,
                        progress=False, timeout=TIMEOUT, registry=registry(**entries), log=lambda line: None)
        assert is_complete(cache) and seal_path(cache).is_file(), key
        assert all(len(server.gets(p)) == 1 for p in paths), key
        lines, problems = check(dataset, root, variant=None if variant == "complex" else variant,
                                registry=registry(**entries))
        assert problems == [] and all("ok" in line for line in lines), lines
    assert set(keys) <= set(package)


def test_training_notices_a_swapped_or_damaged_cache_without_rehashing(tmp_path):
    raw_fixtures.write_shapes3d(tmp_path)
    cache = prepare("shapes3d", tmp_path, download=False, progress=False)
    from disentangle.data import open_prepared

    open_prepared("shapes3d", tmp_path)  # sealed and intact
    blob = bytearray(cache.read_bytes())
    blob[-5] ^= 0xFF  # inside the last sampled block
    cache.write_bytes(bytes(blob))
    with pytest.raises(DatasetDamagedError, match="changed or damaged since it was prepared.*sampled hash"):
        open_prepared("shapes3d", tmp_path)
    cache.write_bytes(bytes(blob) + b"\0")  # a swapped file of another size
    with pytest.raises(DatasetDamagedError, match=r"bytes, sealed at"):
        open_prepared("shapes3d", tmp_path)
    _, problems = check("shapes3d", tmp_path)
    # the fixture is not the published 3dshapes.h5 either: --check says both
    assert len(problems) == 2 and "3dshapes.h5: DIFFERS: it is" in problems[0] and "changed or damaged" in problems[1]


def test_raw_files_put_in_data_root_are_verified_like_downloads(tmp_path, monkeypatch):
    """The manual layout (files under data.root by their official names) gets the same checks: the fixture is not
    the published 3dshapes.h5, so it is refused before any conversion; an unpublished one has its hash recorded."""
    monkeypatch.delenv("DISENTANGLE_UNVERIFIED_RAW")
    raw_fixtures.write_shapes3d(tmp_path / "s")
    with pytest.raises(DownloadError, match=r"3dshapes.h5 is not 3dshapes.h5 \(it is \d+ bytes, not the published "
                                            r"267573662\).*by hand: download https://storage.googleapis.com"):
        prepare("shapes3d", tmp_path / "s", download=False, progress=False)
    assert not (tmp_path / "s" / "shapes3d.h5").exists()
    raw_fixtures.write_cars3d(tmp_path / "c", archive=True)
    lines = []
    prepare("cars3d", tmp_path / "c", download=False, progress=False, log=lines.append,
            factor_sizes=list(raw_fixtures.CARS3D_GRID) + [len(raw_fixtures.CARS3D_FILES)])
    assert len(lines) == 1 and "nips2015-analogy-data.tar.gz has no published sha256; recorded" in lines[0]


def test_the_cheap_check_reads_a_few_blocks_not_the_file(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(256 << 20)  # 256 MiB sparse: a full hash would read it all
    start = time.perf_counter()
    sampled_sha256(big)
    assert time.perf_counter() - start < 0.5


def test_take_matches_several_files_by_name(tmp_path):
    reg = registry(a=entry("x-dat.mat.gz", [http("http://127.0.0.1:9/a")], data=b"aa", dataset="smallnorb"),
                   b=entry("x-cat.mat.gz", [http("http://127.0.0.1:9/b")], data=b"bb", dataset="smallnorb"))
    (tmp_path / "x-cat.mat.gz").write_bytes(b"bb")
    (tmp_path / "other.gz").write_bytes(b"aa")
    import disentangle.data.preparation as prep

    keys = ("a", "b")
    original = prep.source_keys
    prep.source_keys = lambda name, variant: keys
    try:
        assert take("smallnorb", [tmp_path / "x-cat.mat.gz"], tmp_path / "root", registry=reg, log=print)
        with pytest.raises(DownloadError, match="name it as one of x-dat.mat.gz, x-cat.mat.gz"):
            take("smallnorb", [tmp_path / "other.gz"], tmp_path / "root", registry=reg, log=print)
    finally:
        prep.source_keys = original


def test_hydra_spellings_of_the_flags():
    from disentangle.prepare import hydra_args

    assert hydra_args(["data=dsprites", "--check"]) == ["data=dsprites", "check=true"]
    assert hydra_args(["--from-file", "/a b/x.npz", "--from-file=it's.gz"]) == ["from_file=['/a b/x.npz','it\\'s.gz']"]


def _prepare_cli(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "disentangle.prepare", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})


def test_two_concurrent_prepare_commands_fetch_once_and_both_succeed(server, tmp_path):
    """Two real ``python -m disentangle.prepare`` processes on one data root, a registry file of loopback sources
    (``sources=PATH``): one download, one conversion, both exit 0; then ``--check`` and ``--from-file`` on the CLI."""
    import yaml

    src = tmp_path / "official"
    raw_fixtures.write_dsprites(src)
    data = (src / "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz").read_bytes()
    server.files["/dsprites.npz"] = data
    reg_file = tmp_path / "mirror.yaml"
    document = {"schema_version": 1, "files": {"dsprites": entry(
        "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz", [http(f"{server.base}/dsprites.npz")], data=data,
        dataset="dsprites")}}
    reg_file.write_text(yaml.safe_dump(document))
    root = tmp_path / "root"
    args = ["data=dsprites", f"data.root={root}", f"sources={reg_file}", "progress=false", "timeout=5"]
    jobs = [_prepare_cli(*args) for _ in range(2)]
    outs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outs
    assert len(server.gets("/dsprites.npz")) == 1
    assert all("ready in" in out for out, _ in outs)

    job = _prepare_cli("data=dsprites", f"data.root={root}", f"sources={reg_file}", "--check")
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0 and out.count(": ok (") == 2, (out, err)
    (root / "dsprites.h5").write_bytes(b"swapped")
    job = _prepare_cli("data=dsprites", f"data.root={root}", f"sources={reg_file}", "--check")
    out, err = job.communicate(timeout=300)
    assert job.returncode == 1 and "dsprites.h5 was changed or damaged" in out and err.count("\n") == 1, (out, err)

    fresh = tmp_path / "fresh"
    job = _prepare_cli("data=dsprites", f"data.root={fresh}", f"sources={reg_file}", "download=false",
                       "--from-file", str(src / "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"), "progress=false")
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0 and "ready in" in out, (out, err)
    assert len(server.gets("/dsprites.npz")) == 1  # taken from the file, not fetched


def test_the_lock_makes_a_second_fetcher_wait_then_find_the_file(server, tmp_path):
    server.files["/raw.bin"] = PAYLOAD
    e = registry(k=entry("raw.bin", [http(f"{server.base}/raw.bin")], data=PAYLOAD))["k"]
    lines = []
    with dl.file_lock(dl.lock_path(tmp_path / "raw.bin"), log=lines.append):
        import threading

        done = []
        worker = threading.Thread(target=lambda: done.append(_fetch(e, tmp_path, lines)))
        worker.start()
        time.sleep(0.5)
        assert not done and any("waiting for another process preparing raw.bin" in line for line in lines)
        (tmp_path / "raw.bin").write_bytes(PAYLOAD)  # what the holder fetched
    worker.join(timeout=10)
    assert done and server.gets("/raw.bin") == []
