"""The job `gpubox model ID pull REPO` runs in the sandbox (the image's
python3, with huggingface_hub): downloads the Hugging Face repository REPO
into DIR unless DIR already holds a model (config.json, or adapter_config.json
for a PEFT adapter), then no request is made. Stdout carries one JSON object
a line for the CLI: {"start": ...}, {"progress": ...} as files land, then
{"result": ...} or {"error": TEXT} (and exit 1). HF_TOKEN, HF_ENDPOINT and the
rest come from the environment (the token as a job secret: never printed).
The marker files are downloaded last, so an interrupted pull is never taken
for a finished one."""

import argparse
import json
import os
import sys
import threading

MARKERS = ("config.json", "adapter_config.json")
CACHE = ".cache"  # huggingface_hub's metadata and partial downloads in a local_dir


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def local_files(target):
    """(files, bytes) under target, huggingface_hub's .cache left out."""
    count = size = 0
    for root, dirs, names in os.walk(target):
        if root == target and CACHE in dirs:
            dirs.remove(CACHE)
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                count += 1
                size += os.path.getsize(path)
    return count, size


def recorded_commit(target, marker):
    """The commit huggingface_hub noted for the marker file, if it did (its metadata's first line)."""
    try:
        with open(os.path.join(target, CACHE, "huggingface", "download", marker + ".metadata")) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def partial_bytes(target):
    """Bytes of the downloads still in progress (huggingface_hub's *.incomplete files)."""
    total = 0
    for root, _, names in os.walk(os.path.join(target, CACHE)):
        for name in names:
            if name.endswith(".incomplete"):
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return total


class Reporter(threading.Thread):
    """Reports files and bytes done, by looking at the target every half second, until stopped."""

    def __init__(self, target, sizes):
        super().__init__(daemon=True)
        self.target, self.sizes, self.done = target, sizes, threading.Event()
        self.last = None

    def measure(self):
        files = size = 0
        for name, expected in self.sizes.items():
            path = os.path.join(self.target, name)
            if os.path.isfile(path) and os.path.getsize(path) == expected:
                files += 1
                size += expected
        return files, min(size + partial_bytes(self.target), sum(self.sizes.values()))

    def report(self):
        now = self.measure()
        if now != self.last:
            self.last = now
            emit(progress={"files_done": now[0], "files_total": len(self.sizes), "bytes_done": now[1],
                           "bytes_total": sum(self.sizes.values())})

    def run(self):
        while not self.done.wait(0.5):
            self.report()


def hub_error(error):
    """The Hub's own words, on one line (huggingface_hub's message holds its status and reason)."""
    text = " ".join(str(error).split())
    return "%s: %s" % (type(error).__name__, text)


def pull(repo, revision, target):
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    except ImportError as error:
        emit(error="this sandbox's python3 has no huggingface_hub (pip install huggingface_hub): %s" % error)
        return 1
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except Exception as error:  # the Hub's refusal (404, 401, ...) or no network
        emit(error="%s (revision %s): %s" % (repo, revision or "main", hub_error(error)))
        return 1
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}
    emit(start={"commit": info.sha, "files": len(sizes), "bytes": sum(sizes.values())})
    os.makedirs(target, exist_ok=True)
    reporter = Reporter(target, sizes)
    reporter.start()
    try:
        # Everything but the markers, then the markers: only a complete download has them.
        snapshot_download(repo, revision=info.sha, local_dir=target, ignore_patterns=list(MARKERS))
        for marker in MARKERS:
            if marker in sizes:
                hf_hub_download(repo, marker, revision=info.sha, local_dir=target)
    except Exception as error:
        emit(error="%s at %s: %s" % (repo, info.sha, hub_error(error)))
        return 1
    finally:
        reporter.done.set()
        reporter.join()
    reporter.report()
    files, size = local_files(target)
    emit(result={"repo": repo, "revision": revision or "main", "commit": info.sha, "path": target, "files": files,
                 "bytes": size, "skipped": False})
    return 0


def main():
    parser = argparse.ArgumentParser(prog="gpubox_pull.py")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--revision")
    args = parser.parse_args()
    target = os.path.abspath(args.dir)
    marker = next((m for m in MARKERS if os.path.isfile(os.path.join(target, m))), None)
    if marker:
        files, size = local_files(target)
        emit(result={"repo": args.repo, "revision": args.revision or "main", "commit": recorded_commit(target, marker),
                     "path": target, "files": files, "bytes": size, "skipped": True, "marker": marker})
        return 0
    return pull(args.repo, args.revision, target)


if __name__ == "__main__":
    sys.exit(main())
