"""Translate through TF Serving: a client of the exported model's REST and gRPC APIs.

    python examples/serve_client.py --model demo --rest "The Lord is my shepherd." "God is love."
    python examples/serve_client.py --host HOST --model demo --grpc "God is love."
    echo "God is love." | python examples/serve_client.py --model demo --rest
    python examples/serve_client.py --model demo --rest --ids "411 27 9 3"   # translate_ids

The export (`python -m trainers.export ... --out saved_models/demo`, served by
`docker run -p 8501:8501 -p 8500:8500 -v "$PWD/saved_models/demo:/models/demo"
-e MODEL_NAME=demo tensorflow/serving`) has two signatures (keras_transformer/export/savedmodel.py):
`serving_default`, input `text` (string [batch]) -> `translation` (string [batch]) and
`score` (float32 [batch]); and `translate_ids`, input `source_ids` (int32 [batch, src_len],
0-padded, each ending with EOS) -> `ids` (int32 [batch, out_len]) and `score`.

Three parts, each testable without a server: pure functions build the request (the JSON body
of TF Serving's REST API, or the gRPC `PredictRequest`); two small functions send it (urllib,
grpc); and parsers turn either response into columns `{output name: [one value a
sentence]}`, then into translations. REST needs only the standard library. gRPC needs the
optional package `tensorflow-serving-api` (`pip install "tensorflow-serving-api==2.21.*"`,
the version of the project's TensorFlow; it brings grpcio), imported only when used.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import NamedTuple

REST_PORT, GRPC_PORT = 8501, 8500  # TF Serving's defaults
TEXT_SIGNATURE, IDS_SIGNATURE = "serving_default", "translate_ids"
PAD_ID, EOS_ID = 0, 3  # the export's special ids (its manifest.json lists them)


class Translation(NamedTuple):
    text: str
    score: float  # the beam's length-normalised log-probability


class IdTranslation(NamedTuple):
    ids: list[int]  # target pieces, without EOS and padding
    score: float


class ServingError(RuntimeError):
    """TF Serving answered with an error (its message), or with a body that is no answer."""


# Requests.


def _json_string(text: str | bytes):
    """A string for TF Serving's JSON: text as it is; bytes that are not UTF-8 as
    `{"b64": ...}`, TF Serving's encoding of binary strings (the model replaces them with
    U+FFFD)."""
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(text).decode("ascii")}
    return text


def rest_url(host: str, model: str, *, port: int = REST_PORT, version: int | None = None) -> str:
    """`http://HOST:PORT/v1/models/MODEL[/versions/N]:predict` (the latest version if None)."""
    versions = "" if version is None else f"/versions/{version}"
    return f"http://{host}:{port}/v1/models/{model}{versions}:predict"


def rest_body(texts: Sequence[str | bytes], *, columnar: bool = False) -> dict:
    """The JSON body that translates `texts`: `{"signature_name": "serving_default",
    "instances": [TEXT, ...]}` (row format: the signature has one input, so an instance is
    its value), or `{"signature_name": ..., "inputs": {"text": [TEXT, ...]}}` (columnar)."""
    values = [_json_string(text) for text in texts]
    if columnar:
        return {"signature_name": TEXT_SIGNATURE, "inputs": {"text": values}}
    return {"signature_name": TEXT_SIGNATURE, "instances": values}


def _padded(source_ids: Sequence[Sequence[int]]) -> list[list[int]]:
    """Rows of ids, each ending with EOS (added if missing), 0-padded to the longest."""
    rows = [[int(i) for i in row] for row in source_ids]
    rows = [row if row and row[-1] == EOS_ID else [*row, EOS_ID] for row in rows]
    width = max((len(row) for row in rows), default=0)
    return [row + [PAD_ID] * (width - len(row)) for row in rows]


def rest_ids_body(source_ids: Sequence[Sequence[int]]) -> dict:
    """The JSON body for `translate_ids`: `{"signature_name": "translate_ids", "instances":
    [[ID, ..., EOS, 0, ...], ...]}`, rows padded to one length (a tensor is rectangular)."""
    return {"signature_name": IDS_SIGNATURE, "instances": _padded(source_ids)}


def grpc_inputs(texts: Sequence[str | bytes]) -> dict:
    """`PredictRequest.inputs` that translate `texts` with `serving_default`: `{"text":
    TensorProto string [batch]}`, made by `tf.make_tensor_proto`."""
    import tensorflow as tf

    return {"text": tf.make_tensor_proto(list(texts), dtype=tf.string, shape=[len(texts)])}


def grpc_ids_inputs(source_ids: Sequence[Sequence[int]]) -> dict:
    """`PredictRequest.inputs` for `translate_ids`: `{"source_ids": TensorProto int32 [batch,
    src_len]}`, rows padded as in `rest_ids_body`."""
    import tensorflow as tf

    rows = _padded(source_ids)
    shape = [len(rows), len(rows[0]) if rows else 0]
    return {"source_ids": tf.make_tensor_proto(rows, dtype=tf.int32, shape=shape)}


def grpc_request(
    inputs: Mapping, *, model: str, signature: str = TEXT_SIGNATURE, version: int | None = None
):
    """The gRPC `PredictRequest` of `inputs` (`grpc_inputs` or `grpc_ids_inputs`) for a
    model (its latest version if `version` is None). Needs `tensorflow-serving-api`."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    for name, tensor in inputs.items():
        request.inputs[name].CopyFrom(tensor)
    return request


# Sending.


def post_json(url: str, body: dict, *, timeout: float = 60.0) -> dict:
    """POSTs `body` as JSON and returns the decoded answer; ServingError with TF Serving's
    message when it answers an HTTP error."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        text = error.read().decode("utf-8", "replace")
        try:
            message = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            message = text
        raise ServingError(f"{url}: HTTP {error.code}: {message}") from None


def grpc_predict(request, *, host: str, port: int = GRPC_PORT, timeout: float = 60.0):
    """Sends a `PredictRequest` to `HOST:PORT` and returns the `PredictResponse`."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            return stub.Predict(request, timeout=timeout)
        except grpc.RpcError as error:
            raise ServingError(f"{host}:{port}: {error.code().name}: {error.details()}") from None


# Responses.


def rest_columns(response: Mapping) -> dict[str, list]:
    """`{output name: [one value a sentence]}` from a REST answer in either of TF Serving's
    formats: row (`{"predictions": [{"translation": ..., "score": ...}, ...]}`) or columnar
    (`{"outputs": {"translation": [...], "score": [...]}}`)."""
    if "error" in response:
        raise ServingError(response["error"])
    if "predictions" in response:
        rows = response["predictions"]
        if rows and not isinstance(rows[0], Mapping):
            raise ServingError(f"expected one object of named outputs a sentence, got {rows[0]!r}")
        names = rows[0].keys() if rows else ()
        return {name: [row[name] for row in rows] for name in names}
    if "outputs" in response and isinstance(response["outputs"], Mapping):
        return {name: list(values) for name, values in response["outputs"].items()}
    raise ServingError(f"not a predict answer: {str(response)[:200]}")


def grpc_columns(outputs: Mapping) -> dict[str, list]:
    """`{output name: [one value a sentence]}` from a `PredictResponse.outputs` map of
    TensorProtos."""
    import tensorflow as tf

    return {name: tf.make_ndarray(tensor).tolist() for name, tensor in outputs.items()}


def _text(value) -> str:
    if isinstance(value, Mapping):  # {"b64": ...}, should TF Serving send binary
        value = base64.b64decode(value["b64"])
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _outputs(columns: Mapping[str, list], *names: str) -> list[list]:
    missing = [name for name in names if name not in columns]
    if missing:
        raise ServingError(f"the answer has outputs {sorted(columns)}, not {missing}")
    return [columns[name] for name in names]


def translations(columns: Mapping[str, list]) -> list[Translation]:
    """The `serving_default` outputs as one `Translation` a sentence, in input order."""
    if columns == {}:  # an empty batch: TF Serving has no row to name the outputs by
        return []
    pairs = zip(*_outputs(columns, "translation", "score"), strict=True)
    return [Translation(_text(text), float(score)) for text, score in pairs]


def id_translations(columns: Mapping[str, list]) -> list[IdTranslation]:
    """The `translate_ids` outputs as one `IdTranslation` a sentence, in input order."""
    if columns == {}:
        return []
    result = []
    for ids, score in zip(*_outputs(columns, "ids", "score"), strict=True):
        ids = [int(i) for i in ids]
        ids = ids[: ids.index(EOS_ID)] if EOS_ID in ids else [i for i in ids if i != PAD_ID]
        result.append(IdTranslation(ids, float(score)))
    return result


# The command line.


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sentences", nargs="*", help="to translate (default: lines of stdin)")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, help=f"default: {REST_PORT} (REST), {GRPC_PORT} (gRPC)")
    parser.add_argument("--model", required=True, help="the model's name in TF Serving")
    parser.add_argument("--version", type=int, help="default: the latest")
    api = parser.add_mutually_exclusive_group(required=True)
    api.add_argument("--rest", action="store_true", help="TF Serving's REST API")
    api.add_argument("--grpc", action="store_true", help="TF Serving's gRPC API")
    parser.add_argument("--columnar", action="store_true", help="REST's columnar format")
    parser.add_argument("--ids", action="store_true", help="sentences are space-separated ids")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds")
    args = parser.parse_args(argv)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    source_ids = [[int(i) for i in line.split()] for line in sentences] if args.ids else None
    if args.rest:
        url = rest_url(args.host, args.model, port=args.port or REST_PORT, version=args.version)
        body = (
            rest_ids_body(source_ids) if args.ids else rest_body(sentences, columnar=args.columnar)
        )
        columns = rest_columns(post_json(url, body, timeout=args.timeout))
    else:
        inputs = grpc_ids_inputs(source_ids) if args.ids else grpc_inputs(sentences)
        signature = IDS_SIGNATURE if args.ids else TEXT_SIGNATURE
        request = grpc_request(inputs, model=args.model, signature=signature, version=args.version)
        response = grpc_predict(
            request, host=args.host, port=args.port or GRPC_PORT, timeout=args.timeout
        )
        columns = grpc_columns(response.outputs)
    results = id_translations(columns) if args.ids else translations(columns)
    for result in results:
        text = " ".join(map(str, result.ids)) if args.ids else result.text
        print(f"{result.score:.4f}\t{text}")
    return results


if __name__ == "__main__":
    try:
        main()
    except (ServingError, OSError) as error:
        sys.exit(f"error: {error}")
