"""LiteRT's conversion in a process of its own: the second stage of `kt.export.litert_convert`.

`convert_in_child` (what `kt.export.litert.write` calls) runs this module with this Python,

    python -m keras_transformer.export.litert_child SAVED_MODEL OUT --signature KEY ... \
        [--quantize int8] [--error ERROR.json]

which converts the signatures `KEY` of the SavedModel that `litert_convert.save_signatures`
wrote (`litert_convert.convert_saved_model`) and writes the file at OUT. The converter reloads
the SavedModel and freezes its weights into constants: in its own process that memory adds
to none of the model's, which the exporting process holds, and all of it is given back when
the child ends. It is the library's own step, not a program for users.

A failure comes back to the parent as one exception, `ConversionError` (an ImportError, such
as int4's missing ai-edge-quantizer, as the ImportError it was), whose message is one line: the
child's error's type and first line (written at ERROR.json), or the signal that killed it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path


class ConversionError(RuntimeError):
    """LiteRT's conversion failed in its process (`convert_in_child`): the message is one
    line, the converter's error or the signal that ended the process."""


def convert_in_child(saved_model, signature_keys, quantize: str | None, out) -> Path:
    """Converts the signatures `signature_keys` of the SavedModel at `saved_model` into the
    LiteRT file `out` (`litert_convert.convert_saved_model`, with `quantize`), in a process
    of its own that this one waits for.

    Args:
        saved_model: str or path. The SavedModel `litert_convert.save_signatures` wrote.
        signature_keys: the signatures' names, in the file's order.
        quantize: str or None. As `litert_convert.convert`'s.
        out: str or path. The file to write; its folder must exist.

    Returns:
        `out`, as a `Path`.

    Raises:
        ConversionError: the conversion failed, or the process was killed (out of memory):
            one line.
        ImportError: the conversion needs a package that is not installed (int4's
            ai-edge-quantizer), with what to install.
    """
    out = Path(out)
    error = out.with_name(out.name + ".error.json")
    command = [sys.executable, "-m", __name__, str(saved_model), str(out), "--error", str(error)]
    command += [f"--signature={key}" for key in signature_keys]
    command += ["--quantize", quantize] if quantize is not None else []
    try:
        status = subprocess.run(command, env=_environment(), check=False).returncode
        if status == 0 and out.is_file():
            return out
        raise _failure(status, error)
    finally:
        error.unlink(missing_ok=True)


def _environment() -> dict:
    """This process's environment, with the folder this package is imported from first on
    PYTHONPATH (a checkout that is not installed), so that the child imports the same code."""
    environment = dict(os.environ)
    root = Path(__file__).resolve().parents[2]
    if root.name not in ("site-packages", "dist-packages"):
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(root), *filter(None, [environment.get("PYTHONPATH")])]
        )
    return environment


def _failure(status: int, error: Path) -> Exception:
    """The exception for a child that ended with `status`, from its ERROR.json if it wrote
    one: ImportError as itself, anything else a `ConversionError`, each in one line."""
    if status < 0:
        name = signal.Signals(-status).name
        why = " (out of memory?)" if -status == signal.SIGKILL else ""
        return ConversionError(
            f"LiteRT's converter (a process of its own) was killed by {name}{why}"
        )
    if error.is_file():
        found = json.loads(error.read_text())
        line = next((part.strip() for part in found["message"].splitlines() if part.strip()), "")
        if found["type"] == "ImportError":
            return ImportError(line)
        return ConversionError(f"LiteRT's converter failed: {found['type']}: {line}")
    return ConversionError(
        f"LiteRT's converter (a process of its own) exited with status {status} and wrote no "
        "file (its messages are above)"
    )


def main(argv=None) -> int:
    """The child: converts, writes OUT, and on failure ERROR.json (`type`, `message`)."""
    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.export.litert_child", description=__doc__
    )
    parser.add_argument("saved_model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--signature", action="append", required=True)
    parser.add_argument("--quantize")
    parser.add_argument("--error", type=Path, help="where a failure's type and message go")
    args = parser.parse_args(argv)
    try:
        from keras_transformer.export.litert_convert import convert_saved_model

        args.out.write_bytes(convert_saved_model(args.saved_model, args.signature, args.quantize))
    except KeyboardInterrupt:  # the parent, in the same process group, has its own
        return 130
    except Exception as error:
        if args.error is None:
            raise
        described = {"type": type(error).__name__, "message": str(error)}
        args.error.write_text(json.dumps(described))
        return 1
    return 0


__all__ = ["ConversionError", "convert_in_child", "main"]

if __name__ == "__main__":
    sys.exit(main())
