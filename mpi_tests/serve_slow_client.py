#!/usr/bin/python3
"""A client that sends a request body one byte a second (serve_check.sh): prints the status the server
answers with and the error's code ("408 request_timeout"), or "closed" when it closes without an answer.
usage: serve_slow_client.py HOST:PORT"""
import json
import select
import socket
import sys
import time

host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=30)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\n"
          b"Content-Type: application/json\r\nContent-Length: 60\r\n\r\n")
got = b""
for i in range(60):
    try:
        s.sendall(b"{"[:1] if i == 0 else b" ")
    except OSError:
        break
    r, _, _ = select.select([s], [], [], 1.0)
    if r:
        break
deadline = time.time() + 10
while time.time() < deadline:
    try:
        chunk = s.recv(65536)
    except OSError:
        break
    if not chunk:
        break
    got += chunk
if not got:
    print("closed")
else:
    head, _, body = got.partition(b"\r\n\r\n")
    status = head.split(b" ")[1].decode()
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError):
        code = "?"
    print(status, code)
