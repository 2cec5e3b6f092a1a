"""A ZeroMQ DEALER over a Unix socket in pure Python (ZMTP 3.0, NULL mechanism,
rfc.zeromq.org/spec/23), for a Python without pyzmq: a sandbox's kernel on a
bare image reaching its agent's ipc:// endpoint. Only what gpubox.Client needs:
connect with a handshake, send a multipart message, receive one with a timeout.
CURVE (tcp://) needs pyzmq."""

import select
import socket
import struct
import time

_GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + bytes((3, 0)) + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04


class ProtocolError(Exception):
    """The peer is not a ZMTP 3 ROUTER, or it refused us (the message says which)."""


class Frame:
    """A received attachment, as pyzmq's Frame offers it: .bytes, or .buffer (no copy)."""

    __slots__ = ("buffer",)

    def __init__(self, data):
        self.buffer = memoryview(data).toreadonly()

    @property
    def bytes(self):
        return self.buffer.tobytes()


class UnixDealer:
    """One connection to the ROUTER listening at a Unix socket path."""

    def __init__(self, path, timeout):
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buffer = bytearray()
        self.closed = False
        try:
            self._socket.settimeout(timeout)
            self._socket.connect(path)
            self._socket.sendall(_GREETING)
            greeting = self._read_exactly(64)
            if greeting[0] != 0xFF or greeting[9] != 0x7F or greeting[10] < 3:
                raise ProtocolError("not a ZMTP 3 peer")
            if greeting[12:32].rstrip(b"\0") != b"NULL":
                raise ProtocolError("the peer wants the %s mechanism" % greeting[12:32].rstrip(b"\0").decode("ascii", "replace"))
            self._send_frame(_COMMAND, _command(b"READY", {b"Socket-Type": b"DEALER"}))
            while True:
                flags, body = self._read_frame()
                if not flags & _COMMAND:
                    raise ProtocolError("a message before the handshake ended")
                name, rest = _split_command(body)
                if name == b"READY":
                    break
                if name == b"ERROR":
                    reason = bytes(rest[1:1 + rest[0]]).decode("utf-8", "replace") if rest else ""
                    raise ProtocolError("the peer refused us: " + reason)
            self._socket.settimeout(None)
        except BaseException:
            self.close()
            raise

    def send(self, frames):
        """One multipart message; each frame bytes-like."""
        for index, frame in enumerate(frames):
            self._send_frame(_MORE if index + 1 < len(frames) else 0, frame)

    def receive(self, timeout_s):
        """The next message's frames (the first two bytes, the rest Frame), or None when
        none came within timeout_s (None: waits). ConnectionError when the peer left."""
        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        frames = []
        while True:
            left = None if give_up is None else max(0.0, give_up - time.monotonic())
            if not frames and not self._buffer and not select.select([self._socket], [], [], left)[0]:
                return None
            flags, body = self._read_frame()
            if flags & _COMMAND:
                name, rest = _split_command(body)
                if name == b"PING":  # a ZMTP 3.1 heartbeat: answered with its context
                    self._send_frame(_COMMAND, bytes((4,)) + b"PONG" + bytes(rest[2:]))
                continue
            frames.append(bytes(body) if len(frames) < 2 else Frame(body))
            if not flags & _MORE:
                return frames

    def close(self):
        if not self.closed:
            self.closed = True
            self._socket.close()

    # -- framing -------------------------------------------------------------

    def _send_frame(self, flags, data):
        data = memoryview(data).cast("B")
        size = len(data)
        head = struct.pack(">BQ", flags | _LONG, size) if size > 255 else struct.pack(">BB", flags, size)
        self._socket.sendall(head)
        self._socket.sendall(data)

    def _read_exactly(self, n):
        while len(self._buffer) < n:
            chunk = self._socket.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ConnectionError("the agent closed the connection")
            self._buffer += chunk
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def _read_frame(self):
        flags = self._read_exactly(1)[0]
        size = struct.unpack(">Q", self._read_exactly(8))[0] if flags & _LONG else self._read_exactly(1)[0]
        return flags, self._read_exactly(size)


def _command(name, properties):
    body = bytes((len(name),)) + name
    for key, value in properties.items():
        body += bytes((len(key),)) + key + struct.pack(">I", len(value)) + value
    return body


def _split_command(body):
    length = body[0] if body else 0
    return bytes(body[1:1 + length]), body[1 + length:]
