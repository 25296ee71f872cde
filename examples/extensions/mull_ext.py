"""A small runtime for mull extensions written in Python.

mull talks to an extension over JSON-RPC 2.0, one JSON object per line: requests arrive on
stdin, replies go to stdout. Anything else you want to say goes to stderr (mull logs it).
See docs/extension-protocol.md for every message and its schema. Snapshots and replies use
the field names of Think's documentation (camelCase: toolNames, activeTools, stepNumber …);
a reply field mull does not know is reported as a failed hook, never silently dropped.

    from mull_ext import serve

    def before_turn(turn, host):
        return {"maxSteps": 3}

    serve(before_turn=before_turn)

Each hook gets (snapshot, host). `host` makes calls back into the session, if the manifest
grants them: host.read_messages(), host.read_context_block(name), host.write_context_block(name, text).
A hook that raises is reported to mull as an error reply; mull logs it and the turn goes on.
"""

import json
import sys


class HostError(Exception):
    """A host call mull refused (code -32001: permission denied, -32002: unsupported)."""

    def __init__(self, code, message):
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message


class Host:
    """Calls back into the session during a hook."""

    def __init__(self, runtime):
        self._runtime = runtime

    def read_messages(self):
        return self._runtime.call("host/read_messages", {})["messages"]

    def read_context_block(self, name):
        return self._runtime.call("host/read_context_block", {"name": name})["text"]

    def write_context_block(self, name, text):
        self._runtime.call("host/write_context_block", {"name": name, "text": text})


class Runtime:
    def __init__(self, hooks):
        self.hooks = hooks
        self.next_id = 0
        self.host = Host(self)

    def send(self, message):
        message["jsonrpc"] = "2.0"
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def call(self, method, params):
        self.next_id += 1
        request_id = f"ext-{self.next_id}"
        self.send({"id": request_id, "method": method, "params": params})
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        reply = json.loads(line)
        if reply.get("id") != request_id:
            raise RuntimeError(f"expected the reply to {method}, got {line!r}")
        if "error" in reply:
            raise HostError(reply["error"]["code"], reply["error"]["message"])
        return reply.get("result")

    def dispatch(self, method, params):
        if method == "initialize":
            return {"name": params.get("name")}
        if method == "on_chunk_batch":
            handler = self.hooks.get("on_chunk")
            batch = self.hooks.get("on_chunk_batch")
            if batch:
                return batch(params["chunks"], self.host)
            for chunk in params["chunks"]:
                if handler:
                    handler(chunk, self.host)
            return None
        handler = self.hooks.get(method)
        return handler(params, self.host) if handler else None

    def run(self):
        for line in sys.stdin:
            message = json.loads(line)
            method = message.get("method")
            request_id = message.get("id")
            if method == "shutdown":
                return
            try:
                result = self.dispatch(method, message.get("params"))
                if request_id is not None:
                    self.send({"id": request_id, "result": result})
            except Exception as error:  # reported to mull, which logs it as hook_failed
                if request_id is not None:
                    self.send(
                        {
                            "id": request_id,
                            "error": {"code": -32000, "message": f"{type(error).__name__}: {error}"},
                        }
                    )


def serve(**hooks):
    """Answers mull's hook calls with the given handlers until stdin closes."""
    Runtime(hooks).run()
