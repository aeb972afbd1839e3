"""A FAKE adb server for tests: speaks the adb host protocol on loopback so real adbutils talks to it.

Implements the services adbutils 2.x uses: host:version, host:devices(-l), host:tport:serial:S,
host:transport:S, host-serial:S:{features,forward,list-forward,killforward}, and on a transport
`shell:`, `shell,v2:` and `sync:` (STAT, SEND, RECV). Shell commands go to a FakePhone (see
fake_phone.py). Forwards really listen on the host port and proxy to `phone.ports[remote]`, so a real
daemon on loopback can stand in for the one on the phone. It can drop the connection mid-push.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import stat
import struct
import threading
from dataclasses import dataclass, field
from typing import Protocol


class Phone(Protocol):
    serial: str
    state: str
    ports: dict[int, int]
    files: dict[str, bytes]

    def handle_shell(self, command: str) -> tuple[int, str, str]: ...


@dataclass
class Recorded:
    """Everything the fake saw, in order."""

    services: list[str] = field(default_factory=list)  # every host/transport service string
    shell: list[tuple[str, str]] = field(default_factory=list)  # (serial, command)
    pushed: list[tuple[str, str, int]] = field(default_factory=list)  # (serial, path, bytes)
    forwards: list[tuple[str, str, str]] = field(default_factory=list)  # (serial, local, remote)


class _Proxy:
    """A real local listener for one `adb forward`, piping each connection to a host port."""

    def __init__(self, port: int, target: int | None) -> None:
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.target is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)


class FakeAdbServer:
    """Start with `with FakeAdbServer(phones) as fake:`; `fake.port` is the adb server port."""

    VERSION = 41

    def __init__(self, phones: list[Phone]) -> None:
        self.phones = {p.serial: p for p in phones}
        self.recorded = Recorded()
        self.drop_pushes = 0  # the next N SEND requests are cut off mid-file
        self.forwards: dict[tuple[str, int], tuple[str, _Proxy]] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(ConnectionError, OSError):
                    outer._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def __enter__(self) -> FakeAdbServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        for _, proxy in self.forwards.values():
            proxy.close()

    # -- wire helpers -------------------------------------------------------------------------
    @staticmethod
    def _read_exact(conn: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("client closed")
            buf += chunk
        return buf

    def _request(self, conn: socket.socket) -> str:
        size = int(self._read_exact(conn, 4), 16)
        return self._read_exact(conn, size).decode()

    @staticmethod
    def _okay(conn: socket.socket, payload: str | None = None) -> None:
        data = b"OKAY"
        if payload is not None:
            raw = payload.encode()
            data += f"{len(raw):04x}".encode() + raw
        conn.sendall(data)

    @staticmethod
    def _fail(conn: socket.socket, message: str) -> None:
        raw = message.encode()
        conn.sendall(b"FAIL" + f"{len(raw):04x}".encode() + raw)

    # -- services -----------------------------------------------------------------------------
    def _serve(self, conn: socket.socket) -> None:
        service = self._request(conn)
        self.recorded.services.append(service)
        if service == "host:version":
            self._okay(conn, f"{self.VERSION:04x}")
        elif service in ("host:devices", "host:devices-l"):
            lines = []
            for p in self.phones.values():
                extra = f" product:fake model:{p.serial}_model device:fake transport_id:1"
                lines.append(
                    f"{p.serial}\t{p.state}" if service == "host:devices" else f"{p.serial} {p.state}{extra}"
                )
            self._okay(conn, "".join(line + "\n" for line in lines))
        elif service.startswith("host:tport:serial:") or service.startswith("host:transport:"):
            serial = service.rsplit(":", 1)[1]
            phone = self._ready_phone(conn, serial)
            if phone is None:
                return
            conn.sendall(b"OKAY" + (b"\x01" + b"\x00" * 7 if "tport" in service else b""))
            self._transport(conn, phone)
        elif service.startswith("host-serial:"):
            _, serial, rest = service.split(":", 2)
            phone = self._ready_phone(conn, serial)
            if phone is not None:
                self._host_serial(conn, phone, rest)
        elif service == "host:list-forward":
            self._okay(conn, self._forward_listing(None))
        else:
            self._fail(conn, f"unknown host service '{service}'")

    def _ready_phone(self, conn: socket.socket, serial: str) -> Phone | None:
        phone = self.phones.get(serial)
        if phone is None:
            self._fail(conn, f"device '{serial}' not found")
        elif phone.state == "unauthorized":
            self._fail(conn, "device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set")
        elif phone.state != "device":
            self._fail(conn, "device offline")
        else:
            return phone
        return None

    def _forward_listing(self, serial: str | None) -> str:
        return "".join(
            f"{s} tcp:{local} {remote}\n"
            for (s, local), (remote, _) in sorted(self.forwards.items())
            if serial is None or s == serial
        )

    def _host_serial(self, conn: socket.socket, phone: Phone, rest: str) -> None:
        if rest == "features":
            self._okay(conn, "shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir,apex,abb,abb_exec")
        elif rest == "get-state":
            self._okay(conn, phone.state)
        elif rest == "list-forward":
            self._okay(conn, self._forward_listing(phone.serial))
        elif rest.startswith("forward:"):
            spec = rest[len("forward:") :].removeprefix("norebind:")
            local, remote = spec.split(";", 1)
            self.recorded.forwards.append((phone.serial, local, remote))
            local_port = int(local.removeprefix("tcp:"))
            target = phone.ports.get(int(remote.removeprefix("tcp:")))
            with self._lock:
                old = self.forwards.pop((phone.serial, local_port), None)
                if old is not None:
                    old[1].close()
                self.forwards[(phone.serial, local_port)] = (remote, _Proxy(local_port, target))
            conn.sendall(b"OKAYOKAY")
        elif rest.startswith("killforward:"):
            local_port = int(rest.split(":", 1)[1].removeprefix("tcp:"))
            with self._lock:
                old = self.forwards.pop((phone.serial, local_port), None)
            if old is None:
                self._fail(conn, f"listener 'tcp:{local_port}' not found")
                return
            old[1].close()
            conn.sendall(b"OKAYOKAY")
        else:
            self._fail(conn, f"unknown host-serial service '{rest}'")

    def _transport(self, conn: socket.socket, phone: Phone) -> None:
        service = self._request(conn)
        self.recorded.services.append(service)
        if service.startswith("shell,v2:") or service.startswith("shell:"):
            command = service.split(":", 1)[1]
            self.recorded.shell.append((phone.serial, command))
            rc, out, err = phone.handle_shell(command)
            conn.sendall(b"OKAY")
            if service.startswith("shell,v2:"):
                for msg_id, data in ((1, out.encode()), (2, err.encode())):
                    if data:
                        conn.sendall(bytes([msg_id]) + struct.pack("<I", len(data)) + data)
                conn.sendall(bytes([3]) + struct.pack("<I", 1) + bytes([rc & 0xFF]))
            else:
                conn.sendall((out + err).encode())
        elif service == "sync:":
            conn.sendall(b"OKAY")
            self._sync(conn, phone)
        else:
            self._fail(conn, f"unknown transport service '{service}'")

    def _sync(self, conn: socket.socket, phone: Phone) -> None:
        while True:
            cmd = self._read_exact(conn, 4).decode()
            (length,) = struct.unpack("<I", self._read_exact(conn, 4))
            arg = self._read_exact(conn, length).decode()
            if cmd == "STAT":
                data = phone.files.get(arg)
                is_dir = any(p.startswith(arg.rstrip("/") + "/") for p in phone.files)
                if data is not None:
                    mode, size = stat.S_IFREG | 0o644, len(data)
                elif is_dir:
                    mode, size = stat.S_IFDIR | 0o755, 0
                else:
                    mode, size = 0, 0
                conn.sendall(b"STAT" + struct.pack("<III", mode, size, 1700000000 if mode else 0))
            elif cmd == "SEND":
                path = arg.rsplit(",", 1)[0]
                self._receive_file(conn, phone, path)
                return
            elif cmd == "RECV":
                data = phone.files.get(arg)
                if data is None:
                    msg = b"No such file or directory"
                    conn.sendall(b"FAIL" + struct.pack("<I", len(msg)) + msg)
                    return
                for i in range(0, len(data), 65536):
                    chunk = data[i : i + 65536]
                    conn.sendall(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
                conn.sendall(b"DONE" + struct.pack("<I", 0))
                return
            elif cmd == "QUIT":
                return
            else:
                raise ConnectionError(f"unknown sync command {cmd}")

    def _receive_file(self, conn: socket.socket, phone: Phone, path: str) -> None:
        buf = b""
        drop = False
        with self._lock:
            if self.drop_pushes > 0:
                self.drop_pushes -= 1
                drop = True
        while True:
            kind = self._read_exact(conn, 4)
            (n,) = struct.unpack("<I", self._read_exact(conn, 4))
            if kind == b"DATA":
                buf += self._read_exact(conn, n)
                if drop:
                    # Simulates a USB cable pulled mid-push: the socket dies, nothing is stored.
                    conn.shutdown(socket.SHUT_RDWR)
                    conn.close()
                    raise ConnectionError("dropped mid-push (simulated)")
            elif kind == b"DONE":
                phone.files[path] = buf
                self.recorded.pushed.append((phone.serial, path, len(buf)))
                conn.sendall(b"OKAY" + struct.pack("<I", 0))
                return
            else:
                raise ConnectionError(f"unexpected {kind!r} in SEND")
