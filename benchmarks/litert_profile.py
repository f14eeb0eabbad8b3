"""Where a piece goes in a LiteRT file's search: the ops of one decoding step, the state its
loop carries, and a sampled profile of single requests by op type.

    python -m benchmarks.litert_profile --model-dir runs/demo --model model.averaged.keras \
        --length-penalty 1.0 --beam-size 1 4 --litert float32 int8
    python -m benchmarks.litert_profile --file saved_models/demo-litert   # a file written

For each search (`--beam-size`: 1 is greedy) and weights (`--litert`), the file as
`trainers.export --format litert` writes it (`benchmarks.serve.write_litert`, in a process of
its own), or the file of `--file`, then:
- ops a step: the search's WHILE body, op by op type, read from the file (LiteRT runs each
  op of the body once a step; the condition's few ops beside it);
- loop state: the WHILE op's inputs for one request (the first verse), tensors and bytes.
  LiteRT's WHILE kernel copies them between its subgraphs at every step: two or three
  times, the body's outputs to its inputs, to the condition's and, where the body's shapes
  are only known at run time ("dynamic" below), to the op's outputs as well;
- the profile: `--single` test verses, one request at a time, `--passes` times after a
  warm-up pass, sampled by Linux `perf record` (this process's user-space stacks, `--freq`
  samples a second). Each sample goes to the first op kernel on its stack: LiteRT's builtin
  kernels by their namespace (ACTIVATIONS holds SOFTMAX and LOG_SOFTMAX, LOGICAL the logical
  ops), XNNPACK's delegated ops by their microkernel (its FULLY_CONNECTED and BATCH_MATMUL,
  and the packing of a BATCH_MATMUL's right-hand side, the attention's keys and values, that
  XNNPACK redoes at every step), the WHILE kernel's copying of the loop state, or the
  interpreter's re-preparing of ops whose output shapes depend on values (a body with such
  an op is prepared again at every step, from that op on). Shares of the samples inside
  the loop, and the loop's share of all.

Shares, not times: they hold on a loaded machine better than milliseconds do, which the table
prints beside them for orientation only (take timings with `benchmarks.serve`, on a quiet
machine). Needs `perf` (Linux's linux-tools) allowed to sample its own process
(`/proc/sys/kernel/perf_event_paranoid` at most 2); `--no-perf` prints the op counts and
the loop state only. Prints a Markdown table a file, then one JSON object as the last stdout
line.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"
KERNEL = re.compile(r"tflite::ops::(?:builtin|custom)::(\w+)::")
PREPARING = (
    "PrepareOpsAndTensors",
    "PrepareOpsStartingAt",
    "ResizeTensor",
    "AllocateTensors",
    "ArenaPlanner",
)


def operator_names(model) -> list[str]:
    """The op name of each operator code of a parsed LiteRT model (builtins in capitals,
    custom ops by their own names)."""
    from ai_edge_litert import schema_py_generated as schema

    builtins = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        custom = code.CustomCode()
        names.append(custom.decode() if custom else builtins.get(builtin, str(builtin)))
    return names


def parsed(blob: bytes):
    from ai_edge_litert import schema_py_generated as schema

    return schema.Model.GetRootAsModel(blob, 0)


def loop_ops(blob: bytes) -> dict:
    """The search's loop in a LiteRT file: `{"body": Counter(op type), "cond": Counter,
    "while_inputs": [tensor index in the main subgraph]}`, the WHILE op of the signature's
    subgraph that has the most ops in its body (the search; a file's other loops, the text
    cutting's, are smaller)."""
    from ai_edge_litert import schema_py_generated as schema

    model = parsed(blob)
    names = operator_names(model)

    def counted(index):
        graph = model.Subgraphs(index)
        ops = (graph.Operators(i) for i in range(graph.OperatorsLength()))
        return collections.Counter(names[op.OpcodeIndex()] for op in ops)

    found = None
    main = model.Subgraphs(0)
    for i in range(main.OperatorsLength()):
        op = main.Operators(i)
        if names[op.OpcodeIndex()] != "WHILE":
            continue
        options = schema.WhileOptions()
        table = op.BuiltinOptions()
        options.Init(table.Bytes, table.Pos)
        body = counted(options.BodySubgraphIndex())
        if found is None or sum(body.values()) > sum(found["body"].values()):
            found = {
                "body": body,
                "cond": counted(options.CondSubgraphIndex()),
                "while_inputs": [op.Inputs(j) for j in range(op.InputsLength())],
            }
    if found is None:
        raise ValueError("the LiteRT file has no WHILE op: no search loop to profile")
    return found


def loop_state(interpreter, inputs: list[int]) -> tuple[int, int]:
    """`(tensors, bytes)` of the WHILE op's inputs after a request ran: the state the
    loop carries from step to step."""
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    total = 0
    for index in inputs:
        detail = details[index]
        total += int(np.prod(detail["shape"])) * np.dtype(detail["dtype"]).itemsize
    return len(inputs), total


def xnnpack_kind(stack: str) -> str:
    """The op of an XNNPACK microkernel's stack (the frames below the delegate's call)."""
    if "packw" in stack:
        return "BATCH_MATMUL: packing K, V (XNNPACK)"
    if "grouped_gemm" in stack or "batch_matrix" in stack:
        return "BATCH_MATMUL (XNNPACK)"
    if "gemm" in stack or "qd8" in stack or "qc8w" in stack:
        return "FULLY_CONNECTED (XNNPACK)"
    if any(name in stack for name in ("expminusmax", "rmax", "softmax", "vscale")):
        return "SOFTMAX (XNNPACK)"
    if "transpose" in stack:
        return "TRANSPOSE (XNNPACK)"
    return "elementwise (XNNPACK)"


def kind(frames: list[str]) -> tuple[bool, str]:
    """`(in_loop, what)` of one sample's stack, leaf first (the module doc)."""
    in_loop = any("while_kernel" in frame for frame in frames)
    for i, frame in enumerate(frames):
        if "xnnpack::(anonymous namespace)::SubgraphInvoke" in frame:
            return in_loop, xnnpack_kind(" ".join(frames[:i]))
        if "xnnpack::(anonymous namespace)::SubgraphPrepare" in frame or "xnn_reshape" in frame:
            return in_loop, "re-preparing (XNNPACK)"
        if any(name in frame for name in PREPARING):
            return in_loop, "re-preparing (interpreter)"
        if "CopyTensors" in frame or "while_kernel" in frame:
            return in_loop, "WHILE: copying the loop state"
        found = KERNEL.search(frame)
        if found:
            return in_loop, found.group(1).upper()
    return in_loop, "other (interpreter, Python)"


def attributed(perf_data: Path) -> collections.Counter:
    """Samples of a `perf record -g` file by `kind`."""
    command = ["perf", "script", "-i", str(perf_data), "-F", "ip,sym"]
    script = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for sample in script.split("\n\n"):
        lines = [line.split(None, 1) for line in sample.strip().splitlines()]
        frames = [parts[1] if len(parts) > 1 else "?" for parts in lines]
        if frames:
            counts[kind(frames)] += 1
    return counts


def check_perf() -> None:
    """SystemExit saying what is missing when `perf` cannot sample this process."""
    if shutil.which("perf") is None:
        raise SystemExit("perf not found: install Linux's perf (linux-tools), or pass --no-perf")
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    if paranoid.is_file() and int(paranoid.read_text()) > 2:
        raise SystemExit(
            f"{paranoid} is {paranoid.read_text().strip()}: perf may not sample this process "
            "(it needs 2 or less), or pass --no-perf"
        )


def profiled(run, lines: list[str], passes: int, freq: int, folder: Path):
    """`(milliseconds a request, Counter)`: `run(line)` on every line `passes` times under
    `perf record`, after a warm-up pass."""
    for line in lines:
        run(line)
    data = folder / "perf.data"
    command = ["perf", "record", "-F", str(freq), "-g", "-o", str(data), "-p", str(os.getpid())]
    perf = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # perf attaches
    start = time.perf_counter()
    for _ in range(passes):
        for line in lines:
            run(line)
    elapsed = time.perf_counter() - start
    perf.send_signal(signal.SIGINT)
    _, errors = perf.communicate()
    if perf.returncode not in (0, -signal.SIGINT) or not data.is_file():
        raise SystemExit(f"perf record failed ({perf.returncode}): {errors.decode()[-2000:]}")
    return 1000 * elapsed / (passes * len(lines)), attributed(data)


def interpreter_of(path: Path, threads: int):
    """LiteRT's interpreter of a file, with tensorflow-text's ops (as `LiteRTTranslator`)."""
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    from keras_transformer.serving.litert import text_op_registrars

    return InterpreterWithCustomOps(
        custom_op_registerers=text_op_registrars(), model_path=str(path), num_threads=threads
    )


def report(name: str, path: Path, lines: list[str], args) -> dict:
    """One file's table (printed) and its figures."""
    blob = path.read_bytes()
    loop = loop_ops(blob)
    interpreter = interpreter_of(path, args.threads)
    runner = interpreter.get_signature_runner("serving_default")

    def run(line):
        return runner(text=np.array([line], dtype=object))["translations"]

    run(lines[0])
    tensors, state_bytes = loop_state(interpreter, loop["while_inputs"])
    body = loop["body"]
    result = {
        "file": name,
        "ops_a_step": sum(body.values()),
        "cond_ops": sum(loop["cond"].values()),
        "body_ops": dict(body.most_common()),
        "loop_state_tensors": tensors,
        "loop_state_bytes_first_verse": state_bytes,
    }
    print(f"\n### {name}\n")
    print(
        f"Ops a step: {result['ops_a_step']} in the WHILE body (+{result['cond_ops']} in its "
        f"condition): " + ", ".join(f"{op} {n}" for op, n in body.most_common())
    )
    print(f"\nLoop state (first verse): {tensors} tensors, {state_bytes / 1024:.0f} KiB")
    if args.no_perf:
        return result
    with tempfile.TemporaryDirectory() as folder:
        per_request, counts = profiled(run, lines, args.passes, args.freq, Path(folder))
    in_loop = sum(n for (inside, _), n in counts.items() if inside)
    total = sum(counts.values())
    shares = {what: 100 * n / in_loop for (inside, what), n in counts.most_common() if inside}
    result.update(
        {
            "ms_a_request_loaded": round(per_request, 2),
            "samples": total,
            "loop_share": round(100 * in_loop / max(total, 1), 1),
            "loop_shares": {what: round(share, 1) for what, share in shares.items()},
        }
    )
    print(
        f"\n{total} samples; the loop {result['loop_share']}% of them; "
        f"{per_request:.2f} ms a request (orientation only)\n"
    )
    print("| inside the loop | share |\n| --- | ---: |")
    for what, share in shares.items():
        if share >= args.min_share:
            print(f"| {what} | {share:.1f}% |")
    return result


def test_lines(count: int) -> list[str]:
    """The first `count` English verses of the bundled test split."""
    with lzma.open(TEST, "rt", encoding="utf-8") as rows:
        header = next(rows).rstrip("\n").split("\t")
        column = header.index("en")
        return [row.rstrip("\n").split("\t")[column] for row in itertools.islice(rows, count)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a trained run directory")
    parser.add_argument("--model", default="model.keras", help="e.g. model.averaged.keras")
    parser.add_argument("--file", type=Path, help="a LiteRT file (or its folder) instead")
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--stopping", default="early")
    parser.add_argument("--beam-size", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--litert", nargs="+", default=["float32"], help="the files' weights")
    parser.add_argument("--single", type=int, default=20, help="verses, one request each")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="LiteRT's threads")
    parser.add_argument("--freq", type=int, default=4000, help="perf's samples a second")
    parser.add_argument("--min-share", type=float, default=0.5, help="rows below are left out")
    parser.add_argument("--no-perf", action="store_true", help="op counts and loop state only")
    args = parser.parse_args(argv)
    if (args.model_dir is None) == (args.file is None):
        parser.error("give --model-dir (files written from its model) or --file, not both")
    if args.single < 1 or args.passes < 1:
        parser.error(f"--single {args.single} and --passes {args.passes} must be >= 1")
    if not args.no_perf:
        check_perf()
    lines = test_lines(args.single)
    results = []
    if args.file is not None:
        path = args.file / "model.tflite" if args.file.is_dir() else args.file
        if not path.is_file():
            parser.error(f"--file {args.file}: no LiteRT file")
        results.append(report(str(args.file), path, lines, args))
    else:
        from benchmarks.serve import export_litert

        with tempfile.TemporaryDirectory() as folder:
            for beam in args.beam_size:
                for weights in args.litert:
                    directory = Path(folder) / f"beam{beam}_{weights}"
                    export_litert(args, directory, beam, args.stopping, weights)
                    name = f"{'greedy' if beam == 1 else f'beam {beam}'}, {weights}"
                    results.append(report(name, directory / "model.tflite", lines, args))
    print(json.dumps({"benchmark": "litert_profile", "results": results}))


if __name__ == "__main__":
    main(sys.argv[1:])
