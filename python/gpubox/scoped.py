"""ScopedSandbox: Seer's scoped sandbox, whose code is reached through served
functions (gpubox.served, the serve.* RPC methods) rather than a notebook."""

import os
from typing import Optional

from .sandbox import Sandbox


class ScopedSandbox(Sandbox):
    """A Sandbox that serves the @expose functions of interface files (serve()); one thread."""

    def start(self, workspace=None, name: Optional[str] = None) -> "ScopedSandbox":
        """Creates the sandbox and installs the workspace (libraries the served code imports)."""
        super().start(name=name)
        if workspace is not None:
            try:
                workspace.install(self)
            except BaseException:
                self.terminate()
                raise
        return self

    def serve(self, path: str, expose_as: str = "library", name: Optional[str] = None):
        """Serves a local interface.py: returns the generated module ("library"), its Markdown
        description ("prompt") or an MCP server config ("mcp"), as gpubox.served.serve does."""
        from . import served
        name = name or os.path.splitext(os.path.basename(path))[0]
        return served.serve(self.client, path, name, expose_as, sandbox_ref=self.sandbox_id)

    def rpc_logs(self, name: str) -> dict:
        """A served interface's worker output: {"stdout", "stderr"} (Seer's show_rpc_logs)."""
        from . import served
        return served.Service(self.client, name).logs()
