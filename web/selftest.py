#!/usr/bin/env python3
"""Opens a page in a running Chromium through its DevTools protocol and waits, in real time,
for the page's own check (?selftest) to write its verdict into #selftest; prints it, and
exit status 0 only for "pass". Optionally saves a screenshot. Standard library only (a minimal
WebSocket client): web/test.sh runs it against the static build.

    python3 web/selftest.py PORT URL [--timeout S] [--screenshot FILE]
"""
import argparse, base64, json, os, socket, struct, sys, time, urllib.request


class DevTools:
    """One page target's DevTools WebSocket: calls answered in order, events skipped."""

    def __init__(self, ws_url):
        host_port, path = ws_url.removeprefix("ws://").split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(1)
        if b" 101 " not in response.split(b"\r\n")[0]:
            raise RuntimeError(f"the browser refused the DevTools connection: {response[:80]!r}")
        self.next_id = 0

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("the browser closed the DevTools connection")
            data += chunk
        return data

    def _send(self, text):
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _message(self):
        payload = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload += self._read(n)
            if b0 & 0x80:  # the message's last frame
                return json.loads(payload)

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = self._message()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int, help="Chromium's --remote-debugging-port")
    parser.add_argument("url")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{args.port}/json/list"))
    page = next(t for t in targets if t["type"] == "page")
    tools = DevTools(page["webSocketDebuggerUrl"])
    tools.call("Page.navigate", url=args.url)
    verdict, deadline = "", time.monotonic() + args.timeout
    while not verdict and time.monotonic() < deadline:
        time.sleep(0.5)
        result = tools.call("Runtime.evaluate", returnByValue=True,
                            expression="document.getElementById('selftest')?.textContent ?? ''")
        verdict = result["result"].get("value", "")
    if args.screenshot:
        shot = tools.call("Page.captureScreenshot", format="png")
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    print(verdict or f"no verdict within {args.timeout:.0f} s")
    return 0 if verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
