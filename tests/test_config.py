"""TransformerConfig: the paper's defaults, presets, and errors that name the field."""

import pytest

from keras_transformer import TransformerConfig


def test_defaults_are_the_base_model():
    config = TransformerConfig()
    assert (config.d_model, config.d_ff, config.num_heads) == (512, 2048, 8)
    assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
    assert config.dropout == 0.1 and config.vocab_size == 37000
    assert config.share_embeddings and not config.norm_first
    assert (config.activation, config.positional) == ("relu", "sinusoidal")
    assert config.head_dim == 64


@pytest.mark.parametrize(
    "name, expected",
    [
        ("tiny", dict(d_model=128, d_ff=512, num_heads=4, num_encoder_layers=2)),
        ("small", dict(d_model=256, d_ff=1024, num_heads=4, num_encoder_layers=3)),
        ("base", dict(d_model=512, d_ff=2048, num_heads=8, num_encoder_layers=6, dropout=0.1)),
        ("big", dict(d_model=1024, d_ff=4096, num_heads=16, num_encoder_layers=6, dropout=0.3)),
    ],
)
def test_presets(name, expected):
    config = TransformerConfig.preset(name)
    for field, value in expected.items():
        assert getattr(config, field) == value, field
    assert config.num_decoder_layers == config.num_encoder_layers


def test_preset_overrides_and_replace():
    config = TransformerConfig.preset("tiny", vocab_size=1000, norm_first=True)
    assert config.vocab_size == 1000 and config.norm_first and config.d_model == 128
    assert config.replace(dropout=0.0).dropout == 0.0
    assert TransformerConfig.from_dict(config.to_dict()) == config


def test_separate_vocabularies():
    config = TransformerConfig(share_embeddings=False, source_vocab_size=100, target_vocab_size=200)
    assert (config.source_vocab, config.target_vocab) == (100, 200)
    assert TransformerConfig(vocab_size=50).source_vocab == 50


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(d_model=510), "d_model=510 is not divisible by num_heads=8"),
        (dict(d_model=9, num_heads=3), "d_model=9 must be even for sinusoidal positions"),
        (dict(num_heads=0), "num_heads=0 must be >= 1"),
        (dict(d_model="512"), "d_model='512' must be an integer"),
        (dict(d_ff=2048.0), "d_ff=2048.0 must be an integer"),
        (dict(num_encoder_layers=True), "num_encoder_layers=True must be an integer"),
        (dict(vocab_size=1), "vocab_size=1 must be >= 2"),
        (dict(dropout=1.0), r"dropout=1.0 must be a number in \[0, 1\)"),
        (dict(attention_dropout=-0.1), "attention_dropout=-0.1"),
        (dict(norm_first="yes"), "norm_first='yes' must be true or false"),
        (dict(positional="rotary"), "positional='rotary' must be one of"),
        (dict(sinusoid_layout="sines"), "sinusoid_layout='sines' must be one of"),
        (dict(output_bias=1), "output_bias=1 must be true or false"),
        (dict(activation="swishy"), "activation='swishy' is not a Keras activation"),
        (dict(layer_norm_epsilon=0), "layer_norm_epsilon=0 must be > 0"),
        (dict(dtype="float12"), "dtype='float12' is not a Keras dtype policy"),
        (
            dict(source_vocab_size=10, target_vocab_size=20),
            "share_embeddings=True needs one vocabulary, but source_vocab_size=10 != "
            "target_vocab_size=20",
        ),
    ],
)
def test_invalid_values_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**fields)


def test_unknown_preset_and_fields():
    with pytest.raises(ValueError, match=r"preset='huge' is unknown; choose one of \['base'"):
        TransformerConfig.preset("huge")
    with pytest.raises(ValueError, match=r"unknown TransformerConfig field\(s\) \['d_modle'\]"):
        TransformerConfig.preset("tiny", d_modle=3)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(sinusoid_frequencies="t2t"), "sinusoid_frequencies='t2t' must be one of"),
        (dict(position_offset=-1), "position_offset=-1 must be >= 0"),
        (dict(position_offset=2.0), "position_offset=2.0 must be an integer"),
    ],
)
def test_the_fairseq_position_options_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**fields)


def test_the_fairseq_position_options_default_to_the_papers():
    config = TransformerConfig()
    assert (config.sinusoid_frequencies, config.position_offset) == ("paper", 0)
    learned = TransformerConfig.preset(
        "tiny", vocab_size=50, positional="learned", position_offset=2
    )
    from keras_transformer import build_transformer

    assert learned.parameter_count() == build_transformer(learned).count_params()
