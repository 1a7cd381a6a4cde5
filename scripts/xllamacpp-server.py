"""llama.cpp's own HTTP server (the C++ `server` of llama.cpp, as PyPI's prebuilt `xllamacpp`
wheel ships it), started with the command-line flags of `llama-server` that merit's real-server
test passes.

Why it exists: building `llama-server` from source (scripts/setup-test-server.sh) costs CI
about 20 CPU-minutes on its 2 cores, for one test. The `xllamacpp` wheel carries the same server
code already compiled; `scripts/setup-xllamacpp-server.sh` installs it and puts this launcher
behind an executable named `llama-server`, so the test starts either the same way.

Only the flags the test uses are accepted (anything else is an error naming it, not a silent
default). The server runs until the process is killed.
"""

import argparse
import signal
import sys


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="llama-server (xllamacpp)",
        description="llama.cpp's HTTP server from the xllamacpp wheel, with llama-server's flags",
    )
    parser.add_argument("-m", "--model", required=True, help="GGUF model file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--alias", help="model name the API reports and accepts")
    parser.add_argument("-c", "--ctx-size", type=int, default=4096)
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("-np", "--parallel", type=int, default=1)
    parser.add_argument("--no-webui", action="store_true")
    parser.add_argument("--embeddings", action="store_true")
    parser.add_argument("--pooling", choices=["none", "mean", "cls", "last", "rank"])
    return parser.parse_args(argv)


def main(argv):
    args = parse(argv)
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    if args.alias:
        params.model_alias = {args.alias}
    params.n_ctx = args.ctx_size
    if args.threads is not None:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
    params.n_parallel = args.parallel
    # llama-server renders chat templates (and native tool calls) with Jinja by default.
    params.use_jinja = True
    params.ui = not args.no_webui
    if args.embeddings:
        params.embedding = True
    if args.pooling:
        name = "LLAMA_POOLING_TYPE_" + args.pooling.upper()
        params.pooling_type = getattr(xllamacpp.llama_pooling_type, name)
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", file=sys.stderr, flush=True)
    # The server's threads run until the process ends; SIGTERM ends it like llama-server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
