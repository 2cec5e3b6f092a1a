"""The socket under a gpubox.Client: pyzmq's DEALER when pyzmq is installed,
else, for an ipc:// endpoint, the pure-Python one of _zmtp.py (a sandbox's
kernel on a bare image). Both send a multipart message and receive one with a
timeout; received attachments have .bytes and .buffer."""

import math
import time

try:
    import zmq
    from zmq.utils.monitor import recv_monitor_message
except ImportError:  # a bare Python: ipc:// only
    zmq = None

from . import _zmtp


class TransportError(Exception):
    """Connecting failed: `code` is an RPC error code, `message` says why."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class ZmqDealer:
    """pyzmq's DEALER; `curve` is (server_key, public, secret) for tcp://, else None."""

    def __init__(self, endpoint, curve, timeout):
        self._endpoint = endpoint
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 0)
        if curve:
            server_key, public, secret = curve
            self._socket.setsockopt(zmq.CURVE_SERVERKEY, server_key)
            self._socket.setsockopt(zmq.CURVE_PUBLICKEY, public)
            self._socket.setsockopt(zmq.CURVE_SECRETKEY, secret)
        try:
            self._connect(timeout)
        except BaseException:
            self.close()
            raise

    @property
    def closed(self):
        return self._socket.closed

    def _connect(self, timeout):
        try:
            if not timeout:
                self._socket.connect(self._endpoint)
                return
            monitor = self._socket.get_monitor_socket(
                zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
            self._socket.connect(self._endpoint)
        except zmq.ZMQError as e:
            raise ValueError("cannot connect to %r: %s" % (self._endpoint, e)) from None
        try:
            give_up = time.monotonic() + timeout
            while True:
                left_ms = math.ceil((give_up - time.monotonic()) * 1000)
                if left_ms <= 0 or not monitor.poll(left_ms):
                    raise TransportError("unavailable", "cannot reach %s within %g s: is the agent running there?"
                                         % (self._endpoint, timeout))
                event = recv_monitor_message(monitor)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    return
                if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    raise TransportError("permission_denied", "the agent at %s refused this client's key "
                                         "(not on its allow-list)" % self._endpoint)
                raise TransportError("unavailable", "handshake with %s failed: wrong server key or not a gpubox agent"
                                     % self._endpoint)
        finally:
            self._socket.disable_monitor()
            monitor.close(linger=0)

    def send(self, frames):
        self._socket.send_multipart(frames)

    def receive(self, timeout_s):
        timeout_ms = None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))
        if not self._socket.poll(timeout_ms):
            return None
        parts = [self._socket.recv()]
        while self._socket.getsockopt(zmq.RCVMORE):
            parts.append(self._socket.recv(copy=len(parts) < 2))
        return parts

    def close(self):
        if not self._socket.closed:
            self._socket.close(linger=0)
        self._context.term()


class UnixDealer:
    """_zmtp.UnixDealer with the errors of a Client."""

    def __init__(self, endpoint, timeout):
        self._endpoint = endpoint
        try:
            self._dealer = _zmtp.UnixDealer(endpoint[len("ipc://"):], timeout or None)
        except (OSError, _zmtp.ProtocolError) as e:
            raise TransportError("unavailable", "cannot reach %s: %s" % (endpoint, e)) from None

    @property
    def closed(self):
        return self._dealer.closed

    def send(self, frames):
        self._dealer.send(frames)

    def receive(self, timeout_s):
        try:
            return self._dealer.receive(timeout_s)
        except (OSError, _zmtp.ProtocolError) as e:
            raise TransportError("unavailable", "lost the connection to %s: %s" % (self._endpoint, e)) from None

    def close(self):
        self._dealer.close()


def open_dealer(endpoint, curve, timeout):
    """A connected dealer for endpoint (curve: see ZmqDealer); waits up to timeout seconds
    for the handshake (0 or None: pyzmq does not wait)."""
    if zmq is not None:
        return ZmqDealer(endpoint, curve, timeout)
    if curve:
        raise ValueError("%s: a tcp:// endpoint needs pyzmq (pip install pyzmq); this Python has none" % endpoint)
    return UnixDealer(endpoint, timeout)


def curve_keypair():
    if zmq is None:
        raise ValueError("CURVE keys need pyzmq (pip install pyzmq); this Python has none")
    return zmq.curve_keypair()


def curve_public(secret):
    if zmq is None:
        raise ValueError("CURVE keys need pyzmq (pip install pyzmq); this Python has none")
    return zmq.curve_public(secret)
