"""python -m fake_modal --url-file FILE --volumes-dir DIR [--calls FILE] [--blackhole-tunnels] [--open-network NET]
                      [--process-sandboxes]

Serves until SIGTERM, then removes the containers it started. Writes its URL
(http://127.0.0.1:PORT) to FILE once it listens; with --calls, appends the
name of every RPC the SDK made (one a line) and each sandbox's definition;
Modal Volumes are directories under DIR; FAKE_MODAL_SECRETS (JSON) holds the
named Modal secrets; with --blackhole-tunnels every tunnel leads to a port
that accepts and never answers; with --open-network NET, a sandbox whose
network Modal leaves open runs with podman's --network NET (such as
slirp4netns:allow_host_loopback=true, where the host's loopback is 10.0.2.2);
with --process-sandboxes a sandbox is the agent run as a host process
(process_sandboxes.py), for tests that need no container engine."""

import argparse
import asyncio
import json
import os
import signal

from grpclib.server import Server

from .blobs import BlobStore
from .router import FakeRouter
from .service import FakeModal, unsigned_jwt


async def serve(args):
    blobs = BlobStore()
    blackhole = None
    if args.blackhole_tunnels:
        # A port that accepts connections and never says a word: a tunnel whose far end does not answer.
        held = []
        hole = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
        blackhole = ("127.0.0.1", hole.sockets[0].getsockname()[1])
    named = json.loads(os.environ.get("FAKE_MODAL_SECRETS", "{}"))  # named Modal secrets: {name: {KEY: VALUE}}
    service = FakeModal(blobs, calls_path=args.calls, volumes_dir=args.volumes_dir, named_secrets=named,
                        blackhole=blackhole, open_network=args.open_network, process_sandboxes=args.process_sandboxes)
    server = Server([service, FakeRouter(service)])
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]
    service.url = "http://127.0.0.1:%d" % port
    service.jwt = unsigned_jwt()
    temp = args.url_file + ".tmp"
    with open(temp, "w") as f:
        f.write("http://127.0.0.1:%d\n" % port)
    os.rename(temp, args.url_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    await server.wait_closed()
    await service.close()
    blobs.close()


def main():
    parser = argparse.ArgumentParser(prog="fake_modal")
    parser.add_argument("--url-file", required=True)
    parser.add_argument("--calls")
    parser.add_argument("--volumes-dir", required=True)
    parser.add_argument("--blackhole-tunnels", action="store_true")
    parser.add_argument("--open-network")
    parser.add_argument("--process-sandboxes", action="store_true")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
