"""A partner whose TLS endpoint answers before it is asked: its handshake's last record and an
HTTP answer leave in one segment, so a new connection holds the answer before a request is written.
Run as ``python -m tests.early_tls_partner CERT KEY`` with ``SSL_CERT_FILE=CERT`` (aiohttp reads the
trusted certificates when it is imported): one attempt is sent to it, and what the attempt met and
how many connections the partner saw are printed as JSON."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import threading

from service.clock import ManualClock
from service.webhooks.send import Sender

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def serve(listener: socket.socket, context: ssl.SSLContext, accepted: list[int]) -> None:
    while True:
        connection, _ = listener.accept()
        accepted.append(1)
        threading.Thread(target=answer_early, args=(connection, context), daemon=True).start()


def answer_early(connection: socket.socket, context: ssl.SSLContext) -> None:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    with connection:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    connection.sendall(outgoing.read())
                data = connection.recv(65536)
                if not data:
                    return
                incoming.write(data)
        tls.write(ANSWER)  # behind the handshake's Finished, still unsent in ``outgoing``
        connection.sendall(outgoing.read())
        connection.recv(65536)  # until the client closes


async def attempt(port: int) -> dict[str, object]:
    async with Sender(timeout=15, connect_timeout=5, allow_private=True, clock=ManualClock()) as sender:
        url = f"https://127.0.0.1:{port}/hook"
        met = await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"])
    return {"status": met.status_code, "error": met.error_class}


def main(cert: str, key: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.maximum_version = ssl.TLSVersion.TLSv1_2  # the server's Finished is its last record
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []
    threading.Thread(target=serve, args=(listener, context, accepted), daemon=True).start()
    met = asyncio.run(attempt(listener.getsockname()[1]))
    print(json.dumps(met | {"connections": len(accepted)}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
