"""read_file and write_file over the agent's fs.* methods, failing with the
Python errors Inspect's interface names (blocking: the provider calls them on
worker threads)."""

import errno
import posixpath
from typing import Union

from inspect_ai.util import OutputLimitExceededError

from ..client import Client, RpcError
from ..sandbox import WORKSPACE, SandboxError, read_bytes, sandbox_path, write_bytes

__all__ = ["WORKSPACE", "sandbox_path", "read", "write"]


def _os_error(error: RpcError, file: str) -> Exception:
    """The OSError of Inspect's interface for an fs.* refusal, naming file; other codes as they are."""
    if error.code == "not_found":
        return FileNotFoundError(errno.ENOENT, "No such file or directory", file)
    if error.code == "permission_denied":
        return PermissionError(errno.EACCES, "Permission denied", file)
    return error


def _stat(client: Client, path: str, file: str):
    try:
        return client.call("fs.stat", path=path)
    except RpcError as error:
        if error.code == "not_found":
            return None
        raise _os_error(error, file) from None


def read(client: Client, file: str, limit: int, limit_text: str) -> bytes:
    """file's bytes; FileNotFoundError, IsADirectoryError, PermissionError, OutputLimitExceededError past limit."""
    path = sandbox_path(file)
    stat = _stat(client, path, file)
    if stat is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", file)
    if stat["type"] == "dir":
        raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
    if stat["type"] == "file" and stat["size"] > limit:
        raise OutputLimitExceededError(limit_text, None)
    try:
        data = read_bytes(client, path, length=limit + 1)
    except RpcError as error:
        raise _os_error(error, file) from None
    except SandboxError as error:
        raise OSError(errno.EIO, str(error), file) from None
    if len(data) > limit:  # it grew after the stat, or it is a symlink to a large file
        raise OutputLimitExceededError(limit_text, None)
    return data


def write(client: Client, file: str, contents: Union[str, bytes]) -> None:
    """Writes file atomically, parents created; IsADirectoryError, PermissionError, NotADirectoryError."""
    data = contents.encode("utf-8") if isinstance(contents, str) else bytes(contents)
    path = sandbox_path(file)
    stat = _stat(client, path, file)
    if stat is not None and stat["type"] == "dir":
        raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
    try:
        write_bytes(client, path, data)
    except RpcError as error:
        if error.code == "invalid_request" and "not a directory" in error.message:
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", posixpath.dirname(file)) from None
        raise _os_error(error, file) from None
