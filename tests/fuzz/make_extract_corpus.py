#!/usr/bin/python3
"""Writes the seed corpus of fuzz_extract: real job archives (tar + zstd, as the
agent stages them) and hostile ones (tar slip, absolute paths, symlink escape,
device file, setuid, bomb, hard link outside). Uses Python's tarfile and the
zstd command line tool. Run from the repository root:
    /usr/bin/python3 tests/fuzz/make_extract_corpus.py
"""
import io
import os
import subprocess
import tarfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_extract")


def tar_bytes(members):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def member(name, content=b"", type_=tarfile.REGTYPE, mode=0o644, linkname="", size=None):
    info = tarfile.TarInfo(name)
    info.type = type_
    info.mode = mode
    info.linkname = linkname
    info.mtime = 1700000000
    if type_ == tarfile.REGTYPE:
        info.size = len(content) if size is None else size
        return info, content
    return info, None


def zstd(data):
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, stdout=subprocess.PIPE, check=True).stdout


SEEDS = {
    "job-archive": [member("out", type_=tarfile.DIRTYPE, mode=0o755), member("out/a.txt", b"alpha\n"),
                    member("out/sub", type_=tarfile.DIRTYPE, mode=0o755), member("out/sub/data.bin", bytes(range(256)) * 8),
                    member("out/link", type_=tarfile.SYMTYPE, linkname="a.txt"),
                    member("stdout.log", b"hello\n"), member("stderr.log", b"")],
    "hardlink-inside": [member("out/a", b"x"), member("out/b", type_=tarfile.LNKTYPE, linkname="out/a")],
    "tar-slip": [member("ok.txt", b"ok"), member("../evil", b"pwned")],
    "absolute": [member("/tmp/gpubox-fuzz-evil", b"pwned")],
    "symlink-escape": [member("l", type_=tarfile.SYMTYPE, linkname="/etc"), member("l/passwd", b"pwned")],
    "symlink-dotdot": [member("sub/l", type_=tarfile.SYMTYPE, linkname="../../evil")],
    "through-symlink": [member("real", type_=tarfile.DIRTYPE, mode=0o755), member("l", type_=tarfile.SYMTYPE, linkname="real"),
                        member("l/x", b"x")],
    "device": [member("null", type_=tarfile.CHRTYPE)],
    "fifo": [member("pipe", type_=tarfile.FIFOTYPE)],
    "setuid": [member("tool", b"#!/bin/sh\n", mode=0o4755)],
    "hardlink-outside": [member("h", type_=tarfile.LNKTYPE, linkname="/etc/passwd")],
    "duplicate": [member("a", b"1"), member("a", b"2")],
    "bomb": [member("zeros", bytes(16 << 20))],
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, members in SEEDS.items():
        data = tar_bytes(members)
        with open(os.path.join(OUT, "seed-%s.tar.zst" % name), "wb") as f:
            f.write(zstd(data))
    with open(os.path.join(OUT, "seed-job-archive.tar"), "wb") as f:
        f.write(tar_bytes(SEEDS["job-archive"]))
    with open(os.path.join(OUT, "seed-truncated.tar.zst"), "wb") as f:
        f.write(zstd(tar_bytes(SEEDS["job-archive"]))[:100])


if __name__ == "__main__":
    main()
