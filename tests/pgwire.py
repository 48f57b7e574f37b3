"""A PostgreSQL session cut off in the middle of an extended-protocol exchange.

No driver lets a test stop between Execute and Sync, so this speaks the wire protocol (the
PostgreSQL manual, "Frontend/Backend Protocol") over a plain socket: start-up with trust
authentication, a simple query that opens a transaction and takes an advisory lock, then Parse,
Bind and Execute with no Sync. The server runs the statement and waits for the rest of the
exchange: the session is *active*, waiting on its client (``ClientRead``), and holds the lock
beyond every server-side timeout, as when a link goes silent in the middle of a worker's turn.
"""

from __future__ import annotations

import socket
import struct
import threading
from types import TracebackType

from sqlalchemy.engine import make_url

_PROTOCOL_3 = 196608


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


class StuckSession:
    """``with StuckSession(url, lock_key, application_name) as session``: a session holding the
    advisory lock, stuck; ``session.pid`` is its server process; ``release()`` finishes the
    exchange and rolls back; ``ended()`` tells whether the server closed it."""

    def __init__(self, url: str, lock_key: int, application_name: str) -> None:
        parsed = make_url(url)
        self._address = (parsed.host or "127.0.0.1", parsed.port or 5432)
        self._user = parsed.username or "postgres"
        self._database = parsed.database or self._user
        self._application_name = application_name
        self._lock_key = lock_key
        self._socket: socket.socket | None = None
        self._buffer = b""
        self.pid = 0

    def __enter__(self) -> StuckSession:
        self._socket = socket.create_connection(self._address, timeout=10)
        params = b"".join(
            name + b"\0" + value.encode() + b"\0"
            for name, value in (
                (b"user", self._user),
                (b"database", self._database),
                (b"application_name", self._application_name),
            )
        )
        body = struct.pack("!I", _PROTOCOL_3) + params + b"\0"
        self._socket.sendall(struct.pack("!I", len(body) + 4) + body)
        self._until_ready()
        self._socket.sendall(_message(b"Q", f"BEGIN; SELECT pg_advisory_xact_lock({self._lock_key})".encode() + b"\0"))
        self._until_ready()
        unnamed = b"\0"
        self._socket.sendall(
            _message(b"P", unnamed + b"SELECT 1\0" + struct.pack("!H", 0))
            + _message(b"B", unnamed + unnamed + struct.pack("!HHH", 0, 0, 0))
            + _message(b"E", unnamed + struct.pack("!I", 0))
        )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._socket is not None:
            self._socket.close()

    def release(self) -> None:
        """Send the missing Sync, then roll back: the lock is freed by its own session."""
        assert self._socket is not None
        self._socket.sendall(_message(b"S", b""))
        self._until_ready()
        self._socket.sendall(_message(b"Q", b"ROLLBACK\0"))
        self._until_ready()

    def ended(self, within: float = 10.0) -> bool:
        """Whether the server closes the session (after a FATAL error, if any) within ``within`` s."""
        assert self._socket is not None
        self._socket.settimeout(within)
        try:
            while self._socket.recv(65536):
                pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        return True

    def _until_ready(self) -> None:
        """Read messages up to ReadyForQuery; note the process id; raise on an error."""
        assert self._socket is not None
        while True:
            while len(self._buffer) >= 5:
                kind = self._buffer[:1]
                (length,) = struct.unpack("!I", self._buffer[1:5])
                if len(self._buffer) < 1 + length:
                    break
                body, self._buffer = self._buffer[5 : 1 + length], self._buffer[1 + length :]
                if kind == b"R" and struct.unpack("!I", body[:4])[0] != 0:
                    raise RuntimeError("the server asks for a password: these tests need trust authentication")
                if kind == b"K":
                    self.pid = struct.unpack("!I", body[:4])[0]
                if kind == b"E":
                    raise RuntimeError(f"the server refused: {body!r}")
                if kind == b"Z":
                    return
            chunk = self._socket.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the session")
            self._buffer += chunk


class RefusingServer:
    """``with RefusingServer(sqlstate, message) as port``: a server on loopback that speaks just
    enough of the protocol to refuse every session at start-up, as PostgreSQL does while it starts
    up, recovers or stands by (57P03) or has no connection slot left (53300): it declines TLS,
    reads the start-up message and answers a FATAL ErrorResponse with ``sqlstate`` and
    ``message``, then closes."""

    _SSL_REQUEST = 80877103

    def __init__(self, sqlstate: str, message: str) -> None:
        self._fields = b"".join(
            code + value.encode() + b"\0"
            for code, value in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", sqlstate), (b"M", message))
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> int:
        self._thread.start()
        return int(self._listener.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed: the test is over
            with conn:
                conn.settimeout(5)
                try:
                    self._refuse(conn)
                except OSError:
                    continue

    def _refuse(self, conn: socket.socket) -> None:
        while True:
            (length,) = struct.unpack("!I", _exactly(conn, 4))
            body = _exactly(conn, length - 4)
            if struct.unpack("!I", body[:4])[0] == self._SSL_REQUEST:
                conn.sendall(b"N")  # no TLS here: the client goes on in the clear
                continue
            conn.sendall(_message(b"E", self._fields + b"\0"))
            return


def _exactly(conn: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise OSError("the client closed")
        data += chunk
    return data
