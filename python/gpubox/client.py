"""A gpubox RPC client: one ZeroMQ DEALER connection to an agent (pyzmq's, or
for ipc:// without pyzmq a pure-Python one: _transport.py).

A Client may be shared by threads: each request is its own (a Stream is read
by one thread at a time), and the one socket is used under a lock. A thread
waiting for its request's messages reads the socket for everyone, in slices
of _READ_SLICE_S, handing on what is another's; between slices other threads
send.
"""

import collections
import itertools
import math
import os
import threading
import time
from typing import Any, Deque, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

from . import _transport
from .errors import RpcError
from .models import Model
from .protocol import DEFAULT_WINDOW, Header, Kind, decode_body, decode_header, encode_body, encode_header

Key = Union[str, bytes]

# How much longer than a request's deadline the client waits for each message
# before it gives up on the agent (the agent answers at the deadline itself).
_GRACE_S = 5.0
# The longest a thread holds the socket to wait for a message; a sender waits at most this long for it.
_READ_SLICE_S = 0.02


class Chunk(NamedTuple):
    """One DATA message of a stream: its body and its raw attachment frames.
    A tuple, so `for body, attachments in stream:` works too."""

    body: dict
    attachments: List[bytes]


def keygen() -> Tuple[str, str]:
    """A new CURVE key pair, (public, secret), each 40 Z85 characters."""
    public, secret = _transport.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")


def _z85_key(value: Key, what: str) -> bytes:
    key = value.encode("ascii") if isinstance(value, str) else bytes(value)
    if len(key) != 40:
        raise ValueError("%s: expected 40 Z85 characters, got %d" % (what, len(key)))
    return key


# Methods whose whole point is the stream: a plain call() of one is refused.
STREAM_ONLY_METHODS = {
    "proc.spawn": ", or client.call('proc.exec', ...) for a command's whole output at its end",
}


class Stream:
    """One request in flight, made by Client.stream().

    Iterating yields its DATA messages as Chunks, in order, until the request
    ends; iteration then stops (RESULT) or raises RpcError (ERROR). The stream
    grants the agent more credit each time half of `window` has been consumed,
    so a slow reader makes the agent wait rather than buffer.

    `send()` streams DATA to the agent as far as the agent's credit allows,
    `cancel()` asks the agent to stop, `result` waits for the RESULT body.
    `close()` (or leaving a `with` block) cancels a request that has not ended
    and drops whatever still arrives for it.
    """

    def __init__(self, client: "Client", request_id: int, window: int, wait: Optional[float]):
        self._client = client
        self.id = request_id
        self._window = window
        self._half = max(1, (window + 1) // 2)
        self._wait = wait
        self._chunks: Deque[Chunk] = collections.deque()
        self._agent_credit = window  # DATA the agent may still send
        self._send_credit = 0  # DATA this side may still send
        self._final: Union[None, dict, RpcError] = None
        self.result_attachments: List[bytes] = []  # the RESULT's attachment frames (a served function's tensors)

    # -- reading -----------------------------------------------------------

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> Chunk:
        while not self._chunks and self._final is None:
            self._pump()
        if self._chunks:
            chunk = self._chunks.popleft()
            self._grant_if_due()
            return chunk
        if isinstance(self._final, RpcError):
            raise self._final
        raise StopIteration

    @property
    def ended(self) -> bool:
        """True once the RESULT or ERROR has arrived (or the client gave up)."""
        return self._final is not None

    @property
    def result(self) -> dict:
        """The RESULT body, waiting for it; chunks not read yet are dropped.
        Raises RpcError when the request ended with an ERROR."""
        for _ in self:
            pass
        if isinstance(self._final, RpcError):
            raise self._final
        return self._final

    # -- writing -----------------------------------------------------------

    def send(self, body: Optional[dict] = None, attachments: Iterable[bytes] = ()) -> None:
        """Sends one DATA message, first waiting for credit from the agent.

        While it waits, chunks that arrive are queued for iteration, and the
        agent is granted credit for them, so neither side can stall the other.
        """
        while True:
            if self._final is not None:
                if isinstance(self._final, RpcError):
                    raise self._final
                raise RpcError("invalid_request", "request %d has ended; nothing more can be sent" % self.id)
            if self._send_credit > 0:
                break
            self._pump()
            if self._agent_credit == 0 and self._final is None:
                self._grant(self._half)
        self._send_credit -= 1
        self._client._send(Header(self.id, Kind.DATA), body or {}, attachments)

    def cancel(self) -> None:
        """Asks the agent to stop the request; it then ends with `cancelled`
        (unless it had already ended). Does not wait."""
        if self._final is None:
            self._client._send(Header(self.id, Kind.CANCEL), {})

    def close(self) -> None:
        if self._final is None:
            try:
                self.cancel()
            except RpcError:
                pass
            self._final = RpcError("cancelled", "request %d was closed by the client" % self.id)
        self._client._forget(self.id)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals ---------------------------------------------------------

    def _pump(self) -> None:
        """Receives one message for this request."""
        try:
            header, body, attachments = self._client._receive(self.id, self._wait)
        except RpcError as error:
            self.close()
            self._final = error
            raise
        if header.kind == Kind.DATA:
            self._chunks.append(Chunk(body, attachments))
            self._agent_credit -= 1
        elif header.kind == Kind.CREDIT:
            self._send_credit += header.credit
        elif header.kind == Kind.RESULT:
            self._final = body
            self.result_attachments = attachments
        elif header.kind == Kind.ERROR:
            self._final = RpcError.from_body(body)
        else:
            self._final = RpcError("internal", "the agent sent a %s message for request %d" % (header.kind.name, self.id))
        if self._final is not None:
            self._client._forget(self.id)

    def _grant_if_due(self) -> None:
        # Queued chunks plus the agent's credit stay within the window: grant
        # the part of it that has been consumed, once that is half of it.
        consumed = self._window - self._agent_credit - len(self._chunks)
        if consumed >= self._half and self._final is None:
            self._grant(consumed)

    def _grant(self, credit: int) -> None:
        self._client._send(Header(self.id, Kind.CREDIT, credit=credit), {})
        self._agent_credit += credit


class Client:
    """One connection to an agent.

    `endpoint` is ipc://PATH (no keys: the socket file's permissions are the
    authentication) or tcp://HOST:PORT, which uses CURVE and needs the agent's
    public key; the client's key pair is generated when not given (see
    `public_key`). The constructor waits up to `connect_timeout` seconds for
    the handshake (0 or None: does not wait) and raises RpcError `unavailable`
    when nothing answers in time or the handshake fails, `permission_denied`
    when the agent refuses this client's key. Bad arguments raise ValueError.

    Without `endpoint`, the environment's GPUBOX_ENDPOINT is used: the agent
    sets it in its kernel's executor (the agent's own ipc:// socket), so
    `gpubox.Client()` in a cell reaches the sandbox's agent and its model host.

    Thread-safe: threads may share a Client (each reads its own requests'
    Streams); see the module's docstring.
    """

    def __init__(self, endpoint: Optional[str] = None, server_public_key: Optional[Key] = None,
                 client_secret_key: Optional[Key] = None, client_public_key: Optional[Key] = None,
                 connect_timeout: Optional[float] = 10.0):
        if endpoint is None:
            endpoint = os.environ.get("GPUBOX_ENDPOINT", "")
            if not endpoint:
                raise ValueError("no endpoint given and GPUBOX_ENDPOINT is not set (it is inside a sandbox's kernel)")
        self.endpoint = endpoint
        self.public_key: Optional[str] = None  # this client's CURVE public key (tcp only)
        tcp = endpoint.startswith("tcp://")
        if not tcp and not endpoint.startswith("ipc://"):
            raise ValueError("endpoint %r: expected ipc://PATH or tcp://HOST:PORT" % endpoint)
        if tcp:
            if server_public_key is None:
                raise ValueError("a tcp:// endpoint needs server_public_key (the agent's CURVE public key)")
            server_key = _z85_key(server_public_key, "server_public_key")
            if client_secret_key is None:
                if client_public_key is not None:
                    raise ValueError("client_public_key given without client_secret_key")
                public, secret = _transport.curve_keypair()
            else:
                secret = _z85_key(client_secret_key, "client_secret_key")
                public = (_z85_key(client_public_key, "client_public_key") if client_public_key is not None
                          else _transport.curve_public(secret))
            self.public_key = public.decode("ascii")
        elif not os.path.exists(endpoint[len("ipc://"):]):
            raise RpcError("unavailable", "cannot reach %s: no such socket (is the agent running?)" % endpoint)

        self._ids = itertools.count(1)
        # _socket_lock: held to send or to read one slice. _state (a Condition on its own lock):
        # guards the fields below and wakes the threads waiting for a message the reader queued.
        self._socket_lock = threading.Lock()
        self._state = threading.Condition()
        self._queues: Dict[int, Deque[tuple]] = {}  # messages for open requests, not yet taken
        self._zero_copy: set = set()  # open requests whose attachments come as memoryviews of the frames
        self._reading = False  # a thread is reading the socket for everyone
        try:
            self._socket = _transport.open_dealer(endpoint, (server_key, public, secret) if tcp else None,
                                                  connect_timeout)
        except _transport.TransportError as e:
            raise RpcError(e.code, e.message) from None

    # -- requests ----------------------------------------------------------

    def call(self, method: str, /, timeout: Optional[float] = None, *, params: Optional[dict] = None,
             attachments: Iterable[bytes] = (), **kwargs: Any) -> dict:
        """Calls `method` and returns its RESULT body; raises RpcError.

        Keyword arguments are the params (bytes go as msgpack bin); `params`
        holds any whose names clash with `timeout`, `params` or `attachments`
        (raw frames sent after the CALL's body: fs.write's content, a large
        kernel.execute cell). `timeout`
        (seconds) is the request's deadline at the agent: past it the request
        fails with `deadline_exceeded`. What a method streams before its
        RESULT (kernel.execute's output, say) comes back in order as the
        result's "outputs" list: each DATA body, its attachments (if any) as
        "attachments", a list of bytes. proc.spawn, which only makes sense
        as a stream, is refused before anything is sent: use stream() for it.
        """
        if method in STREAM_ONLY_METHODS:
            raise ValueError("%s streams its output and takes input as it runs: use client.stream(%r, ...)%s"
                             % (method, method, STREAM_ONLY_METHODS[method]))
        outputs = []
        with self.stream(method, timeout=timeout, params=params, attachments=attachments, **kwargs) as stream:
            for body, frames in stream:
                item = dict(body) if isinstance(body, dict) else {"body": body}
                if frames:
                    item["attachments"] = [bytes(f) for f in frames]
                outputs.append(item)
            result = stream.result
        if outputs and isinstance(result, dict) and "outputs" not in result:
            result = dict(result, outputs=outputs)
        return result

    def stream(self, method: str, /, timeout: Optional[float] = None, window: int = DEFAULT_WINDOW, *,
               params: Optional[dict] = None, attachments: Iterable[bytes] = (), zero_copy: bool = False,
               **kwargs: Any) -> Stream:
        """Starts `method` and returns its Stream; params as for call().
        `window` is how many DATA messages the agent may send ahead of the
        reader. With `zero_copy` the attachments that arrive for it are
        read-only memoryviews of the received frames instead of bytes copies
        (gpubox.served builds result tensors on them)."""
        if not isinstance(window, int) or window < 1:
            raise ValueError("window: expected a positive integer")
        timeout_ms = 0
        if timeout is not None:
            if timeout <= 0:
                raise ValueError("timeout: expected a positive number of seconds")
            timeout_ms = math.ceil(timeout * 1000)
        body = dict(params or {})
        body.update(kwargs)
        with self._state:
            request_id = next(self._ids)
            self._queues[request_id] = collections.deque()  # before the CALL: its answer may come at once
            if zero_copy:
                self._zero_copy.add(request_id)
        try:
            self._send(Header(request_id, Kind.CALL, method, timeout_ms, window), body, attachments)
        except BaseException:
            self._forget(request_id)
            raise
        return Stream(self, request_id, window, None if timeout is None else timeout + _GRACE_S)

    # -- the model host (gpubox/models.py) ---------------------------------

    def model(self, name: str) -> "Model":
        """A handle on the model host's model `name`: .info(), .tokenize(), .forward(), .generate()..."""
        return Model(self, name)

    def models(self) -> List[dict]:
        """model.list: each model's {name, state, bytes_loaded, bytes_total, ...}."""
        return self.call("model.list")["models"]

    def model_host_starting(self) -> bool:
        """True while sys.info says the model host is starting or restarting."""
        return self.call("sys.info").get("model_host", {}).get("state") in ("starting", "restarting")

    def load_model(self, name: str, path: str, dtype: Optional[str] = None, device: Optional[str] = None,
                   hidden: bool = False, wait: bool = False, tensor_parallel: Optional[int] = None,
                   allow_cpu_split: Optional[bool] = None) -> "Model":
        """model.load; returns the Model (waited for when wait is true). device "cuda:0,1" or
        tensor_parallel N splits the model across devices (rpc/PROTOCOL.md model.load)."""
        params = {"name": name, "path": path}
        if dtype is not None:
            params["dtype"] = dtype
        if device is not None:
            params["device"] = device
        if tensor_parallel is not None:
            params["tensor_parallel"] = tensor_parallel
        if allow_cpu_split is not None:
            params["allow_cpu_split"] = allow_cpu_split
        if hidden:
            params["hidden"] = True
        self.call("model.load", params=params)
        model = self.model(name)
        if wait:
            model.wait_ready()
        return model

    def unload_model(self, name: str) -> dict:
        return self.call("model.unload", model=name)

    def usage(self) -> dict:
        """sys.usage: container, CPU and GPU seconds and each job's wall and CPU seconds (rpc/PROTOCOL.md, "System")."""
        return self.call("sys.usage")

    def gpu_info(self) -> dict:
        """gpu.info: {source: nvml|nvidia-smi|none, gpus: [...], message?}."""
        return self.call("gpu.info")

    def gpu_probe(self) -> dict:
        """gpu.probe: GEMM TFLOP/s and copy GB/s per device; RpcError unavailable without CUDA."""
        return self.call("gpu.probe")

    def close(self) -> None:
        """Closes the connection; requests in flight are abandoned."""
        if getattr(self, "_socket", None) is None:
            return
        with self._socket_lock:
            if not self._socket.closed:
                self._socket.close()
        with self._state:
            self._queues.clear()
            self._zero_copy.clear()
            self._state.notify_all()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals ---------------------------------------------------------

    def _send(self, header: Header, body: dict, attachments: Iterable[bytes] = ()) -> None:
        frames = [encode_header(header), encode_body(body), *attachments]
        with self._socket_lock:
            if self._socket.closed:
                raise RpcError("unavailable", "the client is closed")
            self._socket.send(frames)

    def _forget(self, request_id: int) -> None:
        with self._state:
            self._queues.pop(request_id, None)
            self._zero_copy.discard(request_id)

    def _receive(self, request_id: int, wait: Optional[float]) -> Tuple[Header, dict, List[bytes]]:
        """The next message for request_id, queueing those for other open requests
        (and waking their threads); waits up to `wait` seconds (None: forever)."""
        give_up = None if wait is None else time.monotonic() + wait
        while True:
            with self._state:
                while True:
                    queue = self._queues.get(request_id)
                    if queue:
                        return queue.popleft()
                    if self._socket.closed:
                        raise RpcError("unavailable", "the client is closed")
                    left = None if give_up is None else give_up - time.monotonic()
                    if left is not None and left <= 0:
                        raise RpcError("unavailable", "no answer from %s within %g s: is the agent still running?"
                                       % (self.endpoint, wait))
                    if not self._reading:
                        self._reading = True
                        break
                    self._state.wait(left)  # another thread reads; it wakes us when it queued something
            try:
                message = self._read_one(_READ_SLICE_S if left is None else min(left, _READ_SLICE_S))
            finally:
                with self._state:
                    self._reading = False
                    self._state.notify_all()  # the next reader, or the owner of what was queued
            if message is None:
                continue
            with self._state:
                if message[0].id == request_id:
                    return message
                other = self._queues.get(message[0].id)
                if other is not None:
                    other.append(message)

    def _read_one(self, wait: float) -> Optional[Tuple[Header, dict, List[bytes]]]:
        """One message from the socket within wait seconds, decoded; None when none came."""
        with self._socket_lock:
            if self._socket.closed:
                return None
            try:
                frames = self._socket.receive(wait)
            except _transport.TransportError as e:
                raise RpcError(e.code, e.message) from None
        if frames is None or len(frames) < 2:
            return None
        try:
            message = (decode_header(frames[0]), decode_body(frames[1]), frames[2:])
        except ValueError as e:
            raise RpcError("internal", "the agent sent a malformed message: %s" % e) from None
        if message[2]:
            with self._state:
                keep = message[0].id in self._zero_copy
            message = message[:2] + ([f.buffer if keep else f.bytes for f in message[2]],)
        return message
