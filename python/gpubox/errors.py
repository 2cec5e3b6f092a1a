"""The error every gpubox call raises (RpcError), apart so that client.py and models.py both import it at the top."""

from typing import Optional


class RpcError(Exception):
    """A request failed: `code` is one of protocol.ERROR_CODES, `message`
    says what went wrong, `details` is a dict (often empty)."""

    def __init__(self, code: str, message: str, details: Optional[dict] = None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.details = details if details is not None else {}

    @classmethod
    def from_body(cls, body: dict) -> "RpcError":
        code = body.get("code")
        if not isinstance(code, str):
            return cls("internal", "the agent sent a malformed ERROR body: %r" % (body,))
        details = body.get("details")
        return cls(code, _in_python_words(str(body.get("message", ""))), details if isinstance(details, dict) else None)


# An agent's refusal in the words of this package, not the RPC methods behind it.
_PYTHON_WORDS = (("model.list shows", "client.models() shows"), ("model.hooks lists them", "model.hooks() lists them"),
                 ("fs.list lists it", "Sandbox.download() copies a directory"), ("params.ops[", "ops["), ("params.", ""))


def _in_python_words(message: str) -> str:
    for rpc_words, python_words in _PYTHON_WORDS:
        message = message.replace(rpc_words, python_words)
    return message
