"""An OTLP/HTTP trace receiver for mull's tests.

Decodes each POST /v1/traces body with the official OpenTelemetry protobuf definitions
(opentelemetry-proto): binary protobuf, or the JSON encoding when the content type says so.
Every span received is appended to the file named by argv[1] as one JSON line (the proto's own
JSON mapping, field names as in the .proto, ids as lowercase hex), with its resource and scope.
Answers an empty ExportTraceServiceResponse. Binds 127.0.0.1 on a free port and prints
"listening on http://127.0.0.1:PORT" first.
"""

import base64
import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]


def hex_id(value):
    return base64.b64decode(value).hex() if value else ""


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404, "only /v1/traces")
            return
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        json_body = self.headers.get("content-type", "").startswith("application/json")
        try:
            if json_body:
                request = json_format.Parse(body, ExportTraceServiceRequest())
            else:
                request = ExportTraceServiceRequest.FromString(body)
        except Exception as error:  # noqa: BLE001 - a bad body is the client's fault
            self.send_error(400, f"not an ExportTraceServiceRequest: {error}")
            return
        decoded = json_format.MessageToDict(request, preserving_proto_field_name=True)
        with open(OUT, "a", encoding="utf-8") as out:
            for resource_spans in decoded.get("resource_spans", []):
                resource = resource_spans.get("resource", {})
                for scope_spans in resource_spans.get("scope_spans", []):
                    for span in scope_spans.get("spans", []):
                        for key in ("trace_id", "span_id", "parent_span_id"):
                            span[key] = hex_id(span.get(key, ""))
                        span["resource"] = resource
                        span["scope"] = scope_spans.get("scope", {})
                        span["encoding"] = "json" if json_body else "protobuf"
                        out.write(json.dumps(span) + "\n")
        reply = ExportTraceServiceResponse()
        if json_body:
            payload, kind = json_format.MessageToJson(reply).encode(), "application/json"
        else:
            payload, kind = reply.SerializeToString(), "application/x-protobuf"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
