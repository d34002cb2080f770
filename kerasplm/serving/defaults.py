"""The server's defaults, importable without TensorFlow (``kerasplm serve --help`` shows them)."""

DEFAULT_SIGNATURE = "serving_default"
# TF Serving's ports: --port is gRPC (8500), --rest_api_port REST (8501).
DEFAULT_GRPC_PORT = 8500
DEFAULT_REST_API_PORT = 8501
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_POLL_SECONDS = 2.0
# Below Kubernetes' default terminationGracePeriodSeconds (30 s), so the server finishes its requests
# and exits on its own before the kubelet's SIGKILL.
DEFAULT_SHUTDOWN_GRACE_SECONDS = 25.0
# 1024 rows covers interactive clients and the batch-scoring clients TF Serving users write (a few
# hundred rows per call); a larger request is refused rather than holding the machine for minutes.
DEFAULT_MAX_BATCH_SIZE = 1024
# Rows per signature call: bounds the memory of one request (a translator's attention and beam
# tensors grow with the batch) while keeping the per-call overhead small.
DEFAULT_BATCH_CHUNK_SIZE = 64
# Threads answering gRPC calls (the REST side runs a thread per connection); more calls wait in line.
DEFAULT_GRPC_WORKERS = 16
# Open REST connections (one thread each); over it a new connection is answered 503 at once and closed.
# Equal to the listen backlog: a burst that the backlog holds is also served.
DEFAULT_MAX_CONNECTIONS = 256
# From a connection's accept (or a keep-alive request's first byte) to the end of its header block: a
# client trickling bytes cannot hold a connection (and its thread) longer than this.
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
# The output tensors of one request's answer (numbers at their size, float32 4 bytes a value; strings their
# length), checked chunk by chunk: 8 M float32 values, e.g. 64 sentences of 30 tokens through an ELMo of
# 1024-wide layers with all four outputs. REST's JSON text of it is 3-5 times larger (and its Python lists
# larger still while it is written), which is why the default is not higher.
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
