"""A minimal OTLP/HTTP receiver for the CLI's OpenTelemetry tests.

Decodes what an exporter POSTs to /v1/traces and /v1/metrics (protobuf, or JSON) with the
official `opentelemetry-proto` package and appends each request, as JSON, to the file given
as the first argument: one line {"signal": "traces"|"metrics", "body": {...}}. Prints
"listening PORT" on stdout once it accepts connections (port 0 asks the OS for a free one).

    python receiver.py OUT.jsonl
"""

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

SIGNALS = {
    "/v1/traces": ("traces", ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", ExportMetricsServiceRequest, ExportMetricsServiceResponse),
}


def main():
    out = sys.argv[1]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            signal = SIGNALS.get(self.path)
            if signal is None:
                self.send_error(404)
                return
            name, request_type, response_type = signal
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = request_type()
            content_type = self.headers.get("Content-Type", "")
            try:
                if content_type.startswith("application/json"):
                    json_format.Parse(body, request)
                else:
                    request.ParseFromString(body)
            except Exception as error:  # a malformed export is the test's failure to see
                self.send_error(400, str(error))
                return
            record = {
                "signal": name,
                "content_type": content_type,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": json_format.MessageToDict(request),
            }
            # Written before the answer: once the exporter has its 200, the data is on disk.
            with open(out, "a", encoding="utf-8") as file:
                file.write(json.dumps(record) + "\n")
            payload = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
