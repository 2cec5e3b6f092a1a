"""The serve worker's channel to the agent: fd 3, length-prefixed msgpack messages whose large attachments travel in memfds.

Every message, both ways: u32 LE body length, u32 LE attachment count, count x
u64 LE lengths, the msgpack body, the small attachments' raw bytes.
Attachments of MEMFD_THRESHOLD or more are in one memfd per message instead
(passed with SCM_RIGHTS with the prefix; their length has bit 63 set; each
starts on a page boundary): a received tensor is built on the mapped memfd (no
copy), a result tensor is written into one (one copy) that the agent maps as
its outgoing frames. Memfds are reused while warm: each side tells the other
which of its memfds it no longer maps ({"op": "released", "files": [[st_dev,
st_ino], ...]}, sent before the next message), and only those are written again.
"""

import array
import collections
import fcntl
import mmap
import os
import socket
import struct
import threading
import weakref

from . import _msgpack, tensor_wire

MEMFD_THRESHOLD = int(os.environ.get("GPUBOX_SERVE_MEMFD_THRESHOLD") or 256 << 10)  # attachments this big travel in the memfd
IN_MEMFD = 1 << 63
PAGE = 4096


def pack(body):
    """body as msgpack: any str a Python value holds (surrogates too), nested as deep as Python allows."""
    return _msgpack.packb(body, unicode_errors="surrogatepass", max_depth=None)


def unpack(data):
    return _msgpack.unpackb(data, unicode_errors="surrogatepass", max_depth=None)


def file_id(fd):
    info = os.fstat(fd)
    return [info.st_dev, info.st_ino]


class ResultMemfds:
    """Warm memfds for the large attachments the worker sends, mapped here;
    each is lent to one message and back once the agent has released it.
    Sealed against shrinking (the agent maps them). Any thread."""

    MAX_SLOTS = 4
    MAX_BYTES = 512 << 20

    def __init__(self):
        self.lock = threading.Lock()
        self.slots = []  # [fd, mmap, size, file id, lent]; guarded by lock

    def lend(self, size):
        """A slot of at least size bytes, or None (the caller makes a one-off)."""
        size = (size + PAGE - 1) // PAGE * PAGE
        with self.lock:
            idle = [slot for slot in self.slots if not slot[4]]
            fitting = [slot for slot in idle if slot[2] >= size]
            total = sum(slot[2] for slot in self.slots)
            if fitting:
                slot = min(fitting, key=lambda slot: slot[2])
            elif idle and total - max(idle, key=lambda slot: slot[2])[2] + size <= self.MAX_BYTES:
                slot = max(idle, key=lambda slot: slot[2])
                os.ftruncate(slot[0], size)
                slot[1].close()
                slot[1], slot[2] = mmap.mmap(slot[0], size), size
            elif len(self.slots) < self.MAX_SLOTS and total + size <= self.MAX_BYTES:
                fd = os.memfd_create("gpubox-serve-out", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                os.ftruncate(fd, size)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
                slot = [fd, mmap.mmap(fd, size), size, file_id(fd), False]
                self.slots.append(slot)
            else:
                return None
            slot[4] = True
            return slot

    def give_back(self, files):
        with self.lock:
            for slot in self.slots:
                if slot[3] in files:
                    slot[4] = False


class Channel:
    """fd 3. One reader (the main thread); writers take the lock."""

    def __init__(self):
        self.sock = socket.socket(fileno=3)
        self.lock = threading.Lock()
        self.released = collections.deque()  # the agent's memfds no longer mapped here (any thread appends)
        self.memfds = ResultMemfds()

    def _fill(self, view):
        while len(view):
            n = self.sock.recv_into(view)
            if n == 0:
                return False
            view = view[n:]
        return True

    def _exact(self, n):
        buffer = bytearray(n)
        if n and not self._fill(memoryview(buffer)):
            return None
        return buffer

    def _prefix(self):
        """The 8-byte prefix and the memfd passed with it (or None)."""
        head, fds = bytearray(), []
        while len(head) < 8:
            data, ancillary, _, _ = self.sock.recvmsg(8 - len(head), socket.CMSG_SPACE(4 * 4))
            if not data:
                return None, None
            head += data
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += array.array("i", payload[:len(payload) - len(payload) % 4])
        for extra in fds[1:]:
            os.close(extra)
        return head, (fds[0] if fds else None)

    def read(self):
        """(body, frames), or None once the agent closed the channel."""
        head, memfd = self._prefix()
        if head is None:
            return None
        try:
            body_len, count = struct.unpack("<II", head)
            lengths = struct.unpack("<%dQ" % count, self._exact(8 * count)) if count else ()
            body = unpack(self._exact(body_len))
            mapped = None
            if memfd is not None:
                extent = 0
                for length in lengths:
                    if length & IN_MEMFD:
                        extent = (extent + (length & ~IN_MEMFD) + PAGE - 1) // PAGE * PAGE
                mapped = memoryview(b"")
                if extent:
                    # Only this message's part. Private: the tensors built on it may be
                    # written to (copy on write); once nothing here maps it, the agent
                    # may reuse the memfd.
                    mapping = mmap.mmap(memfd, extent, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
                    weakref.finalize(mapping, self.released.append, file_id(memfd))
                    mapped = memoryview(mapping)
        finally:
            if memfd is not None:
                os.close(memfd)
        frames, offsets, end = [None] * count, [None] * count, 0
        for i, length in enumerate(lengths):
            if length & IN_MEMFD:
                length &= ~IN_MEMFD
                if mapped is None:
                    raise ValueError("an attachment in a memfd came without one")
                offsets[i] = (end, length)
                frames[i] = mapped[end:end + length]
                end = (end + length + PAGE - 1) // PAGE * PAGE
        # A tensor's chunks are consecutive in the mapping: one view of them all.
        found = []
        tensor_wire.tensor_maps(body.get("args"), found)
        tensor_wire.tensor_maps(body.get("kwargs"), found)
        for desc in found:
            indexes = desc.get("attachments")
            if (isinstance(indexes, list) and indexes and all(isinstance(i, int) and 0 <= i < count and offsets[i]
                                                               for i in indexes)
                    and all(offsets[a][0] + offsets[a][1] == offsets[b][0] for a, b in zip(indexes, indexes[1:]))):
                start = offsets[indexes[0]][0]
                desc["_buffer"] = mapped[start:start + sum(offsets[i][1] for i in indexes)]
        for i in range(count):
            if frames[i] is None:
                frames[i] = memoryview(bytearray(lengths[i]))
                if not self._fill(frames[i]):
                    return None
        return body, frames

    def send(self, body, frames=()):
        self.send_packed(pack(body), frames)

    def send_packed(self, packed, frames=()):
        lengths, memfd, end = [], None, 0
        extent = sum((len(frame) + PAGE - 1) // PAGE * PAGE for frame in frames if len(frame) >= MEMFD_THRESHOLD)
        slot = self.memfds.lend(extent) if extent else None
        try:
            for frame in frames:
                length = len(frame)
                if length >= MEMFD_THRESHOLD and slot is not None:
                    memfd, next_end = slot[0], (end + length + PAGE - 1) // PAGE * PAGE
                    slot[1][end:end + length] = frame
                    slot[1][end + length:next_end] = bytes(next_end - end - length)  # nothing of an earlier message
                    end = next_end
                    lengths.append(length | IN_MEMFD)
                    continue
                if length >= MEMFD_THRESHOLD:
                    if memfd is None:
                        memfd = os.memfd_create("gpubox-serve", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                    view, done = memoryview(frame).cast("B"), 0
                    while done < length:
                        done += os.pwrite(memfd, view[done:], end + done)
                    end = (end + length + PAGE - 1) // PAGE * PAGE
                    length |= IN_MEMFD
                lengths.append(length)
            if memfd is not None and slot is None:
                # Sealed: the agent maps it, so it must never shrink under that mapping.
                fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE |
                            fcntl.F_SEAL_SEAL)
            head = struct.pack("<II", len(packed), len(frames)) + b"".join(struct.pack("<Q", n) for n in lengths)
            with self.lock:
                self._send_released()
                message = head + packed
                if memfd is not None:
                    sent = self.sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                          array.array("i", [memfd]))])
                    message = message[sent:]
                self.sock.sendall(message)
                for frame in frames:
                    if 0 < len(frame) < MEMFD_THRESHOLD:
                        self.sock.sendall(frame)
        except BaseException:
            if slot is not None:
                self.memfds.give_back([slot[3]])
            raise
        finally:
            if memfd is not None and slot is None:
                os.close(memfd)

    def _send_released(self):
        """Tells the agent which of its memfds nothing here maps any more. REQUIRES: self.lock."""
        files = []
        while self.released:
            files.append(self.released.popleft())
        if files:
            packed = pack({"op": "released", "files": files})
            self.sock.sendall(struct.pack("<II", len(packed), 0) + packed)


