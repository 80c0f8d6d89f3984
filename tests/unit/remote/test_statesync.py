"""remote/statesync.py: what is packed (the latest complete checkpoint), and that an unpack is
used only when the whole stream arrived with the sender's size and sha256."""

from __future__ import annotations

import io
import json
import os
import struct

from launcher.remote import statesync as s

AREAS = [s.LATEST + "backup", s.LATEST + "checkpoints/custom"]


def _ckpt(d, prefix, data=b"w" * 1000, state=True):
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{prefix}.index").write_bytes(b"i" + prefix.encode())
    (d / f"{prefix}.data-00000-of-00001").write_bytes(data)
    if state:
        (d / "checkpoint").write_text(f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n')


def _source(tmp_path):
    src = tmp_path / "src"
    _ckpt(src / "backup" / "chief", "ckpt-1")
    _ckpt(src / "backup" / "chief", "ckpt-2")  # the state file now names ckpt-2
    _ckpt(src / "backup" / "chief", "ckpt-3", state=False)  # being written: not in the state file
    _ckpt(src / "checkpoints" / "custom", "ckpt-40")
    _ckpt(src / "checkpoints", "ckpt-001")  # fit's ModelCheckpoint: not a resume area
    (src / "backup" / "workertemp_1").mkdir()  # no state file: skipped
    return src


def _framed(tar: bytes, trailer: dict, cut: int = 0) -> io.BytesIO:
    body = tar[:len(tar) - cut]
    frames = b"".join(struct.pack(">I", len(body[i:i + 1000])) + body[i:i + 1000] for i in range(0, len(body), 1000))
    if cut:
        return io.BytesIO(frames)  # the link dropped: no end frame, no trailer
    return io.BytesIO(frames + struct.pack(">I", 0) + json.dumps(trailer).encode() + b"\n")


def test_pack_selects_the_latest_complete_checkpoint_of_each_resume_area(tmp_path):
    src = _source(tmp_path)
    assert s.selection(str(src), AREAS) == [
        "backup/chief/checkpoint", "backup/chief/ckpt-2.data-00000-of-00001", "backup/chief/ckpt-2.index",
        "checkpoints/custom/checkpoint", "checkpoints/custom/ckpt-40.data-00000-of-00001",
        "checkpoints/custom/ckpt-40.index"]
    assert s.selection(str(src), ["final_model", "checkpoints"]) == ["checkpoints"]  # whole dirs; missing skipped


def test_unpack_replaces_areas_only_after_a_verified_stream(tmp_path):
    src = _source(tmp_path)
    buf = io.BytesIO()
    summary = s.pack(str(src), AREAS, buf)
    assert summary["size"] == len(buf.getvalue()) and summary["files"] == 6
    dst = tmp_path / "dst"
    _ckpt(dst / "backup" / "chief", "ckpt-9", data=b"stale")  # an earlier run's backup
    (dst / "checkpoints" / "custom").mkdir(parents=True)
    (dst / "checkpoints" / "custom" / "junk").write_text("x")
    result = s.unpack(str(dst), AREAS, _framed(buf.getvalue(), summary))
    assert result == {"ok": True, "size": summary["size"]}
    assert sorted(os.listdir(dst / "backup" / "chief")) == ["checkpoint", "ckpt-2.data-00000-of-00001",
                                                             "ckpt-2.index"]
    assert (dst / "backup/chief/ckpt-2.data-00000-of-00001").read_bytes() == b"w" * 1000
    assert sorted(os.listdir(dst / "checkpoints" / "custom")) == ["checkpoint", "ckpt-40.data-00000-of-00001",
                                                                   "ckpt-40.index"]
    assert sorted(os.listdir(dst)) == ["backup", "checkpoints"]  # no temp dirs left


def test_a_source_without_backup_removes_a_stale_one(tmp_path):
    (tmp_path / "empty").mkdir()
    buf = io.BytesIO()
    summary = s.pack(str(tmp_path / "empty"), AREAS, buf)
    dst = tmp_path / "dst"
    _ckpt(dst / "backup" / "chief", "ckpt-9")
    assert s.unpack(str(dst), AREAS, _framed(buf.getvalue(), summary))["ok"]
    assert os.listdir(dst) == []


def _unchanged_after(tmp_path, stream_of) -> dict:
    src = _source(tmp_path)
    buf = io.BytesIO()
    summary = s.pack(str(src), AREAS, buf)
    dst = tmp_path / "dst"
    _ckpt(dst / "backup" / "chief", "ckpt-9", data=b"old")
    before = {p.relative_to(dst): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    result = s.unpack(str(dst), AREAS, stream_of(buf.getvalue(), summary))
    after = {p.relative_to(dst): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert after == before  # nothing replaced, no partial files, no temp dir
    assert sorted(os.listdir(dst)) == ["backup"]
    return result


def test_a_digest_mismatch_is_never_used(tmp_path):
    result = _unchanged_after(tmp_path, lambda tar, summary: _framed(tar, {**summary, "sha256": "0" * 64}))
    assert result == {"error": "ValueError: copy not used: sha256 mismatch"}


def test_a_stream_cut_midway_is_never_used(tmp_path):
    result = _unchanged_after(tmp_path, lambda tar, summary: _framed(tar, summary, cut=1500))
    assert "error" in result and "ended early" in result["error"], result


def test_a_sender_abort_is_never_used(tmp_path):
    result = _unchanged_after(tmp_path, lambda tar, summary: _framed(tar, {"abort": "h1 could not pack: EIO"}))
    assert result == {"error": "ValueError: copy not used: h1 could not pack: EIO"}
