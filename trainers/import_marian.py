"""`python -m trainers.import_marian PATH --model-dir DIR`: the first name of
`trainers.import_pretrained`, which imports OPUS-MT (Marian) and NLLB-200 (M2M100)
checkpoints alike (its docstring has the details). Kept as an alias."""

import sys

from trainers.import_pretrained import (  # noqa: F401
    PRETRAINED,
    import_marian,
    import_pretrained,
    parse_args,
)
from trainers.import_pretrained import main as _main


def main(argv=None) -> int:
    return _main(argv, prog="python -m trainers.import_marian")


if __name__ == "__main__":
    sys.exit(main())
