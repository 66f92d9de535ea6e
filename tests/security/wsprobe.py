"""A deliberately small, hostile client of herd's head: mutual TLS (Python's ssl), a websocket
handshake and frames written by hand (RFC 6455), and the few protobuf fields of herd's protocol
(shared/proto/herd/v1) encoded by hand. It sends what a real agent or CLI never would: frames over
the size limit, bytes that are not protobuf, registrations as other nodes or with stale
incarnations. Standard library only; it talks to loopback addresses of the test's own cluster."""

import base64
import os
import socket
import ssl
import struct
import time


class Refused(Exception):
    """The server answered the websocket upgrade with an HTTP error."""

    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, value):
    return _varint(num << 3) + _varint(value)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def register(node_id, address, incarnation):
    """AgentToHead{version: 1, register: Register{node: NodeInfo{node_id, addresses}, incarnation}}."""
    node = field_bytes(1, node_id) + field_bytes(2, address)
    reg = field_bytes(1, node) + field_varint(2, incarnation)
    return field_varint(1, 1) + field_bytes(2, reg)


def nodes_request(request_id=1):
    """ClientToHead{version: 1, request_id, nodes: NodesRequest{}}."""
    return field_varint(1, 1) + field_varint(2, request_id) + field_bytes(7, b"")


def parse_fields(data):
    """Top-level fields of a protobuf message: [(number, value)] with bytes or int values."""
    out, i = [], 0
    while i < len(data):
        key, i = _read_varint(data, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
        elif wire == 2:
            n, i = _read_varint(data, i)
            value, i = data[i:i + n], i + n
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((num, value))
    return out


def _read_varint(data, i):
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def register_ack(message):
    """(accepted, reason) of a HeadToAgent carrying a RegisterAck, else None."""
    for num, value in parse_fields(message):
        if num == 2:
            fields = dict(parse_fields(value))
            return bool(fields.get(1, 0)), fields.get(2, b"").decode(errors="replace")
    return None


class WsClient:
    """One mutual-TLS websocket connection to host:port at path, with the given certificate."""

    def __init__(self, host, port, path, ca, cert, key, timeout=10):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False  # the head's certificate names its node's address: checked
        ctx.load_verify_locations(ca)  # by the CA, which is what herd's own dialers rely on too
        ctx.load_cert_chain(cert, key)
        raw = socket.create_connection((host, port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw)
        self.sock.settimeout(timeout)
        self._buf = b""
        key_b64 = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key_b64}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        while b"\r\n\r\n" not in self._buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the websocket handshake")
            self._buf += chunk
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            body = self._buf
            try:
                body += self.sock.recv(4096)
            except (OSError, ssl.SSLError):
                pass
            self.close()
            raise Refused(status, body.decode(errors="replace").strip())

    def send_frame(self, payload, opcode=0x2, declared_length=None):
        """One masked frame. declared_length: a length header that differs from the payload (a
        frame announced as bigger than what follows)."""
        n = len(payload) if declared_length is None else declared_length
        header = bytes([0x80 | opcode])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _read(self, n):
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def recv_message(self):
        """The next data message's payload; raises ConnectionError on a close frame or EOF.
        Pings are answered."""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            if opcode == 0x8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"close frame {code}")
            if opcode == 0x9:
                self.send_frame(payload, opcode=0xA)
                continue
            if opcode in (0x1, 0x2):
                return payload

    def closed_within(self, seconds):
        """True when the server closes the connection (close frame, EOF or reset) within seconds,
        reading and dropping whatever data messages come first."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.sock.settimeout(max(0.1, deadline - time.time()))
            try:
                self.recv_message()
            except TimeoutError:  # an OSError too, but only means "nothing yet"
                continue
            except (ConnectionError, ssl.SSLError, OSError):
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
