#!/usr/bin/env python3
"""One call of Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService/
ShouldRateLimit) over plain-text HTTP/2, with nothing beyond Python's standard library:
what Envoy's `ratelimit` filter sends, for checking a deployed `sluicegate serve` where no
gRPC tool is installed. Prints the answer's overall code (OK, OVER_LIMIT) and exits 0,
or prints the failure and exits 1.

Usage: python3 scripts/rls-call.py HOST:PORT TOKEN DOMAIN KEY=VALUE [KEY=VALUE ...]
(the entries form one descriptor; TOKEN is an app token, sent as `authorization`)."""
import socket
import struct
import sys

CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}
PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
# HTTP/2 frame types and flags (RFC 9113 §6).
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field (strings and messages alike)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def request(domain, entries):
    descriptor = b"".join(
        field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in entries
    )
    return field(1, domain.encode()) + field(2, descriptor)


def hpack_int(n, prefix):
    """An HPACK integer with a `prefix`-bit prefix and the pattern bits zero (RFC 7541 §5.1)."""
    limit = (1 << prefix) - 1
    if n < limit:
        return bytes([n])
    out, n = bytearray([limit]), n - limit
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def headers(pairs):
    """Each header as a literal without indexing, new name, no Huffman (RFC 7541 §6.2.2)."""
    out = bytearray()
    for name, value in pairs:
        out += b"\x00"
        for text in (name.encode(), value.encode()):
            out += hpack_int(len(text), 7) + text
    return bytes(out)


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def code(message):
    """The RateLimitResponse's overall_code (field 1, a varint); absent means 0."""
    i = 0
    while i < len(message):
        key, i = message[i], i + 1
        if key == 0x08:
            return message[i]
        if key & 7 == 2:
            length, i = message[i], i + 1
            i += length
        elif key & 7 == 0:
            while message[i] & 0x80:
                i += 1
            i += 1
        else:
            raise ValueError(f"unexpected field {key:#x} in the answer")
    return 0


def call(addr, token, domain, entries):
    host, port = addr.rsplit(":", 1)
    body = request(domain, entries)
    grpc = b"\x00" + struct.pack(">I", len(body)) + body
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + frame(SETTINGS, 0, 0)
            + frame(HEADERS, END_HEADERS, 1, headers([
                (":method", "POST"), (":scheme", "http"), (":path", PATH),
                (":authority", addr), ("content-type", "application/grpc"),
                ("te", "trailers"), ("authorization", f"Bearer {token}"),
            ]))
            + frame(DATA, END_STREAM, 1, grpc)
        )
        answer = b""
        while True:
            head = read_exact(sock, 9)
            length = int.from_bytes(head[:3], "big")
            kind, flags = head[3], head[4]
            stream = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
            payload = read_exact(sock, length)
            if kind == SETTINGS and not flags & ACK:
                sock.sendall(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                sock.sendall(frame(PING, ACK, 0, payload))
            elif kind == GOAWAY or (kind == RST_STREAM and stream == 1):
                raise ConnectionError(f"the server reset the call (frame type {kind})")
            elif kind == DATA and stream == 1:
                answer += payload
            if stream == 1 and kind in (DATA, HEADERS) and flags & END_STREAM:
                break
    if len(answer) < 5:
        # A trailers-only answer: a gRPC error, whose status is in the (compressed) trailers.
        raise ValueError("no answer message: the call failed (wrong token or domain?)")
    return CODES.get(code(answer[5:]), "UNKNOWN")


def main():
    if len(sys.argv) < 5 or not all("=" in e for e in sys.argv[4:]):
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    entries = [tuple(e.split("=", 1)) for e in sys.argv[4:]]
    try:
        print(call(sys.argv[1], sys.argv[2], sys.argv[3], entries))
    except (OSError, ValueError) as e:
        print(f"rls-call: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
