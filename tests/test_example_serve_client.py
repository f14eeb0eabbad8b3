"""examples/serve_client.py: requests in TF Serving's documented formats, responses parsed, and
the whole client against a small stand-in for TF Serving that runs an exported SavedModel.

TF Serving's REST API (tensorflow_serving/g3doc/api_rest.md): a predict body is
`{"signature_name": ..., "instances": [...]}` (row format; with one named input an instance is
that input's value) or `{"signature_name": ..., "inputs": {NAME: [...]}}` (columnar); binary
strings are `{"b64": ...}`. The answer is `{"predictions": [{OUTPUT: value, ...}, ...]}` (row;
one object a sentence when there are several outputs) or `{"outputs": {OUTPUT: [...]}}`
(columnar); errors `{"error": message}`. The gRPC tests need `tensorflow-serving-api` and
are skipped without it.
"""

import base64
import http.server
import json
import re
import threading

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

import keras_transformer as kt
from examples import serve_client as client
from tests import bible

MODEL = "tiny"
SENTENCES = ["In the beginning God created the heavens.", "Amen.", ""]
INVALID_UTF8 = b"invalid \xff\xfe bytes"


# Requests, against the documented format.


def test_rest_body_row_and_columnar_formats():
    body = client.rest_body(["God is love.", "Amén."])
    assert body == {"signature_name": "serving_default", "instances": ["God is love.", "Amén."]}
    columnar = client.rest_body(["God is love."], columnar=True)
    assert columnar == {"signature_name": "serving_default", "inputs": {"text": ["God is love."]}}
    assert json.loads(json.dumps(body)) == body  # plain JSON


def test_rest_body_sends_bytes_that_are_not_utf8_as_b64():
    body = client.rest_body([INVALID_UTF8, "ñ".encode()])
    binary, text = body["instances"]
    assert set(binary) == {"b64"} and base64.b64decode(binary["b64"]) == INVALID_UTF8
    assert text == "ñ"


def test_rest_ids_body_ends_rows_with_eos_and_pads_them():
    body = client.rest_ids_body([[5, 6], [7, 8, 9, 3], []])
    assert body == {
        "signature_name": "translate_ids",
        "instances": [[5, 6, 3, 0], [7, 8, 9, 3], [3, 0, 0, 0]],
    }


def test_rest_url():
    assert client.rest_url("localhost", "demo") == "http://localhost:8501/v1/models/demo:predict"
    assert (
        client.rest_url("h", "demo", port=9000, version=2)
        == "http://h:9000/v1/models/demo/versions/2:predict"
    )


def test_grpc_inputs_are_tensor_protos():
    inputs = client.grpc_inputs(["God is love.", INVALID_UTF8])
    assert list(inputs) == ["text"]
    assert inputs["text"].dtype == tf.string.as_datatype_enum
    assert [d.size for d in inputs["text"].tensor_shape.dim] == [2]
    assert list(inputs["text"].string_val) == [b"God is love.", INVALID_UTF8]
    ids = client.grpc_ids_inputs([[5, 6], [7, 8, 9, 3]])["source_ids"]
    assert ids.dtype == tf.int32.as_datatype_enum
    np.testing.assert_array_equal(tf.make_ndarray(ids), [[5, 6, 3, 0], [7, 8, 9, 3]])
    assert tf.make_ndarray(client.grpc_inputs([])["text"]).shape == (0,)


def test_grpc_request():
    predict_pb2 = pytest.importorskip("tensorflow_serving.apis.predict_pb2")
    request = client.grpc_request(client.grpc_inputs(["Amen."]), model="demo", version=3)
    request = predict_pb2.PredictRequest.FromString(request.SerializeToString())
    assert request.model_spec.name == "demo" and request.model_spec.version.value == 3
    assert request.model_spec.signature_name == "serving_default"
    assert list(request.inputs["text"].string_val) == [b"Amen."]
    latest = client.grpc_request(
        client.grpc_ids_inputs([[5]]), model="demo", signature="translate_ids"
    )
    assert not latest.model_spec.HasField("version")
    assert tf.make_ndarray(latest.inputs["source_ids"]).tolist() == [[5, 3]]


# Responses.


def test_rest_answers_in_row_and_columnar_formats_parse_alike():
    expected = [client.Translation("Dios es amor.", -1.25), client.Translation("", 0.0)]
    row = {
        "predictions": [
            {"translation": "Dios es amor.", "score": -1.25},
            {"translation": "", "score": 0},
        ]
    }
    columnar = {"outputs": {"translation": ["Dios es amor.", ""], "score": [-1.25, 0.0]}}
    for answer in (row, columnar):
        assert client.translations(client.rest_columns(json.loads(json.dumps(answer)))) == expected
    assert client.translations(client.rest_columns({"predictions": []})) == []
    binary = {"b64": base64.b64encode("Sí".encode()).decode()}
    b64 = {"outputs": {"translation": [binary], "score": [-1]}}
    assert client.translations(client.rest_columns(b64)) == [client.Translation("Sí", -1.0)]


def test_rest_id_answers_drop_eos_and_padding():
    answer = {
        "predictions": [
            {"ids": [5, 6, 3, 0], "score": -2.0},
            {"ids": [3, 0, 0, 0], "score": -0.5},
        ]
    }
    assert client.id_translations(client.rest_columns(answer)) == [
        client.IdTranslation([5, 6], -2.0),
        client.IdTranslation([], -0.5),
    ]


def test_rest_errors_and_malformed_answers_are_refused():
    with pytest.raises(client.ServingError, match="Servable not found"):
        client.rest_columns({"error": "Servable not found for request: Latest(half)"})
    with pytest.raises(client.ServingError, match="not a predict answer"):
        client.rest_columns({"result": [1.0]})
    with pytest.raises(client.ServingError, match="named outputs"):
        client.rest_columns({"predictions": ["a single unnamed output"]})
    with pytest.raises(client.ServingError, match="not \\['translation'\\]"):
        client.translations({"ids": [[5, 3]], "score": [-1.0]})  # translate_ids's answer
    with pytest.raises(ValueError):  # one score short
        client.translations({"translation": ["a", "b"], "score": [-1.0]})


def test_grpc_outputs_parse():
    outputs = {
        "translation": tf.make_tensor_proto(["Dios es amor.", "Amén."]),
        "score": tf.make_tensor_proto(np.array([-1.5, -0.25], "float32")),
    }
    assert client.translations(client.grpc_columns(outputs)) == [
        client.Translation("Dios es amor.", -1.5),
        client.Translation("Amén.", -0.25),
    ]
    ids = {"ids": tf.make_tensor_proto(np.array([[9, 3, 0]], "int32")), "score": outputs["score"]}
    ids["score"] = tf.make_tensor_proto(np.array([-1.5], "float32"))
    assert client.id_translations(client.grpc_columns(ids)) == [client.IdTranslation([9], -1.5)]


# The client against an exported model, behind a stand-in for TF Serving.


@pytest.fixture(scope="module")
def saved_model(tiny_export):
    """An untrained tiny model exported as `trainers.export` does (conftest's `tiny_export`,
    shared with tests/test_export.py), named MODEL, loaded."""
    return tf.saved_model.load(str(tiny_export[2]))


def _from_json(value):
    """A JSON input value as TF Serving reads it: `{"b64": ...}` is bytes."""
    if isinstance(value, dict):
        return base64.b64decode(value["b64"])
    return [_from_json(v) for v in value] if isinstance(value, list) else value


def _to_json(value):
    """An output value as TF Serving writes it: strings as text (no name ends in _bytes)."""
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def tf_serving_predict(loaded, body: dict) -> dict:
    """What TF Serving's REST predict does with `body`, per its documentation."""
    signature = loaded.signatures[body.get("signature_name", "serving_default")]
    specs = signature.structured_input_signature[1]  # {input name: TensorSpec}
    if "instances" in body:
        rows = body["instances"]
        if rows and isinstance(rows[0], dict) and set(rows[0]) != {"b64"}:  # named inputs
            columns = {name: [row[name] for row in rows] for name in specs}
        else:
            (name,) = specs  # one named input: an instance is its value
            columns = {name: rows}
    else:
        columns = body["inputs"] if isinstance(body["inputs"], dict) else {"text": body["inputs"]}
    if set(columns) != set(specs):
        raise ValueError(f"inputs {sorted(columns)}, but the signature takes {sorted(specs)}")
    tensors = {name: tf.constant(_from_json(v), specs[name].dtype) for name, v in columns.items()}
    outputs = {name: _to_json(t.numpy().tolist()) for name, t in signature(**tensors).items()}
    if "instances" in body:
        rows = zip(*outputs.values(), strict=True)  # every output has one value a sentence
        return {"predictions": [dict(zip(outputs, row, strict=True)) for row in rows]}
    return {"outputs": outputs}


@pytest.fixture(scope="module")
def rest_server(saved_model):
    """A local HTTP server answering `POST /v1/models/tiny[/versions/N]:predict` as TF Serving
    would, with the exported model; its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            match = re.fullmatch(r"/v1/models/(\w+)(/versions/\d+)?:predict", self.path)
            if not match or match[1] != MODEL:
                name = match[1] if match else self.path
                return self.reply(404, {"error": f"Servable not found for request: Latest({name})"})
            if self.headers["Content-Type"] != "application/json":
                return self.reply(400, {"error": "expected JSON"})
            try:
                self.reply(200, tf_serving_predict(saved_model, body))
            except (KeyError, ValueError, TypeError, tf.errors.InvalidArgumentError) as error:
                self.reply(400, {"error": str(error)})

        def reply(self, status, answer):
            data = json.dumps(answer).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()


def _direct(saved_model, texts):
    out = saved_model.signatures["serving_default"](text=tf.constant(texts, tf.string))
    return [
        client.Translation(t.decode("utf-8"), float(s))
        for t, s in zip(out["translation"].numpy(), out["score"].numpy(), strict=True)
    ]


def test_the_builders_use_the_exported_signatures_names(saved_model):
    text, ids = (saved_model.signatures[name] for name in ("serving_default", "translate_ids"))
    assert set(client.rest_body(["x"], columnar=True)["inputs"]) == set(
        text.structured_input_signature[1]
    )
    assert set(client.grpc_inputs(["x"])) == set(text.structured_input_signature[1])
    assert set(client.grpc_ids_inputs([[5]])) == set(ids.structured_input_signature[1])
    assert set(text.structured_outputs) == {"translation", "score"}
    assert set(ids.structured_outputs) == {"ids", "score"}


def test_rest_cli_row_and_columnar_give_the_models_translations(saved_model, rest_server, capsys):
    expected = _direct(saved_model, SENTENCES)
    common = ["--host", "127.0.0.1", "--port", str(rest_server), "--model", MODEL, "--rest"]
    assert client.main([*common, *SENTENCES]) == expected
    assert client.main([*common, "--columnar", "--version", "1", *SENTENCES]) == expected
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [f"{t.score:.4f}\t{t.text}" for t in expected]
    assert expected[2] == client.Translation("", 0.0)  # the empty sentence


def test_rest_sends_invalid_utf8_which_the_model_replaces(saved_model, rest_server):
    url = client.rest_url("127.0.0.1", MODEL, port=rest_server)
    answer = client.post_json(url, client.rest_body([INVALID_UTF8]))
    assert client.translations(client.rest_columns(answer)) == _direct(saved_model, [INVALID_UTF8])


def _check_id_translations(saved_model, translate):
    """`translate(lines of space-separated ids)` gives what `translate_ids` gives directly."""
    vocabularies = bible.vocabularies()
    source_ids = next(
        iter(kt.data.source_batches(SENTENCES[:2], vocabularies.source, max_length=24))
    )
    out = saved_model.signatures["translate_ids"](source_ids=source_ids)
    results = translate([" ".join(str(i) for i in row if i) for row in source_ids.numpy()])
    for result, ids, score in zip(results, out["ids"].numpy(), out["score"].numpy(), strict=True):
        assert result.ids + [client.EOS_ID] == [int(i) for i in ids if i]
        assert result.score == pytest.approx(float(score))


def test_rest_cli_translate_ids(saved_model, rest_server):
    server = ["--host", "127.0.0.1", "--port", str(rest_server), "--model", MODEL]
    _check_id_translations(
        saved_model, lambda lines: client.main([*server, "--rest", "--ids", *lines])
    )


def test_rest_reports_tf_servings_error(rest_server):
    url = client.rest_url("127.0.0.1", "missing", port=rest_server)
    with pytest.raises(client.ServingError, match=r"HTTP 404: Servable not found"):
        client.post_json(url, client.rest_body(["Amen."]))


@pytest.fixture(scope="module")
def grpc_server(saved_model):
    """A local gRPC PredictionService answering as TF Serving would; its port."""
    grpc = pytest.importorskip("grpc")
    pytest.importorskip("tensorflow_serving.apis.prediction_service_pb2_grpc")
    from concurrent import futures

    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            if request.model_spec.name != MODEL:
                context.abort(grpc.StatusCode.NOT_FOUND, "Servable not found")
            signature = saved_model.signatures[request.model_spec.signature_name]
            inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
            response = predict_pb2.PredictResponse()
            response.model_spec.CopyFrom(request.model_spec)
            for name, value in signature(**inputs).items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(None)


def test_grpc_cli_gives_the_models_translations(saved_model, grpc_server):
    server = ["--host", "127.0.0.1", "--port", str(grpc_server), "--grpc"]
    assert client.main([*server, "--model", MODEL, *SENTENCES]) == _direct(saved_model, SENTENCES)
    with pytest.raises(client.ServingError, match="NOT_FOUND: Servable not found"):
        client.main([*server, "--model", "missing", "Amen."])


def test_grpc_cli_translate_ids(saved_model, grpc_server):
    server = ["--host", "127.0.0.1", "--port", str(grpc_server), "--model", MODEL]
    _check_id_translations(
        saved_model, lambda lines: client.main([*server, "--grpc", "--ids", *lines])
    )
