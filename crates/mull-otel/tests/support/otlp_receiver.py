"""An OTLP/HTTP trace and metrics receiver for mull's tests.

Decodes each POST /v1/traces or /v1/metrics body with the official OpenTelemetry protobuf
definitions (opentelemetry-proto): binary protobuf, or the JSON encoding when the content type
says so. Every span received is appended to the file named by argv[1] as one JSON line (the
proto's own JSON mapping, field names as in the .proto, ids as lowercase hex), with its resource
and scope; every metric to the file argv[1] + ".metrics", the same way. Answers an empty
Export*ServiceResponse. Binds 127.0.0.1 on a free port and prints
"listening on http://127.0.0.1:PORT" first.
"""

import base64
import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]
METRICS_OUT = OUT + ".metrics"


def hex_id(value):
    return base64.b64decode(value).hex() if value else ""


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path == "/v1/traces":
            kinds = (ExportTraceServiceRequest, ExportTraceServiceResponse)
        elif self.path == "/v1/metrics":
            kinds = (ExportMetricsServiceRequest, ExportMetricsServiceResponse)
        else:
            self.send_error(404, "only /v1/traces and /v1/metrics")
            return
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        json_body = self.headers.get("content-type", "").startswith("application/json")
        try:
            if json_body:
                request = json_format.Parse(body, kinds[0]())
            else:
                request = kinds[0].FromString(body)
        except Exception as error:  # noqa: BLE001 - a bad body is the client's fault
            self.send_error(400, f"not an {kinds[0].__name__}: {error}")
            return
        decoded = json_format.MessageToDict(request, preserving_proto_field_name=True)
        if self.path == "/v1/metrics":
            self.write_metrics(decoded)
        else:
            self.write_spans(decoded, json_body)
        reply = kinds[1]()
        if json_body:
            payload, kind = json_format.MessageToJson(reply).encode(), "application/json"
        else:
            payload, kind = reply.SerializeToString(), "application/x-protobuf"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def write_metrics(self, decoded):
        with open(METRICS_OUT, "a", encoding="utf-8") as out:
            for resource_metrics in decoded.get("resource_metrics", []):
                resource = resource_metrics.get("resource", {})
                for scope_metrics in resource_metrics.get("scope_metrics", []):
                    for metric in scope_metrics.get("metrics", []):
                        metric["resource"] = resource
                        metric["scope"] = scope_metrics.get("scope", {})
                        out.write(json.dumps(metric) + "\n")

    def write_spans(self, decoded, json_body):
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

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
