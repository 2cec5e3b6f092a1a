"""The fake's answer to every gRPC method it does not implement: UNIMPLEMENTED, logged."""

from grpclib import GRPCError, Status


def answer_unimplemented(base, what, log_of):
    """Gives each abstract method of the grpclib service base class `base` a body
    that logs "UNIMPLEMENTED <what> <name>" (through log_of(servicer)) and
    raises UNIMPLEMENTED, so a call the SDK starts making shows in the log."""
    def make(name):
        async def method(self, stream):
            log_of(self)("UNIMPLEMENTED %s %s" % (what, name))
            await stream.recv_message()
            raise GRPCError(Status.UNIMPLEMENTED, "the fake %s has no %s" % (what, name))
        method.__name__ = name
        return method

    for name in list(base.__abstractmethods__):
        setattr(base, name, make(name))
    base.__abstractmethods__ = frozenset()
