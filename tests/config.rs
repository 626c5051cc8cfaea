//! Bad model configs are rejected with a message that names the problem.

use shige::config::{ModelConfig, Position};

fn error_of(toml: &str) -> String {
    match ModelConfig::from_toml_str(toml, "test.toml").and_then(|c| c.validate().map(|_| c)) {
        Ok(c) => panic!("accepted {toml:?} as {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_good_config_parses_with_defaults() {
    let cfg = ModelConfig::from_toml_str("vocab_size = 100\nposition = \"rope\"\nn_layer = 2", "t")
        .unwrap();
    cfg.validate().unwrap();
    assert_eq!(
        (cfg.position, cfg.n_layer, cfg.n_embd, cfg.n_head),
        (Position::Rope, 2, 128, 4)
    );
}

#[test]
fn bad_configs_are_rejected_before_any_tensor() {
    let cases = [
        (
            "vocab_size = 10\nn_embd = 30\nn_head = 4",
            "not divisible by n_head",
        ),
        (
            "vocab_size = 10\nn_embd = 12\nn_head = 4\nposition = \"rope\"",
            "odd",
        ),
        ("vocab_size = 10\nn_layer = 0", "n_layer must be at least 1"),
        ("vocab_size = 10\nn_embd = 0", "n_embd must be at least 1"),
        (
            "vocab_size = 10\nblock_size = 0",
            "block_size must be at least 1",
        ),
        ("vocab_size = 0", "vocab_size must be at least 1"),
        (
            "vocab_size = 10\nposition = \"absolute\"",
            "unknown variant `absolute`",
        ),
        ("vocab_size = 10\nn_heads = 4", "unknown field `n_heads`"),
        ("vocab_size = 10\nn_layer = -1", "n_layer"),
        ("vocab_size = 10\nn_layer = \"two\"", "n_layer"),
        ("vocab_size = 10\ndropout = 1.5", "dropout"),
        (
            "vocab_size = 10\nsinusoidal_scale = 0.0",
            "sinusoidal_scale 0 must be",
        ),
        (
            "vocab_size = 10\nsinusoidal_scale = nan",
            "sinusoidal_scale NaN must be",
        ),
        ("vocab_size = 10\nrope_base = inf", "rope_base inf must be"),
        ("vocab_size = 10\nn_layer = ", "test.toml"),
    ];
    for (toml, expected) in cases {
        let message = error_of(toml);
        assert!(
            message.contains(expected),
            "{toml:?}: expected {expected:?} in {message:?}"
        );
        assert!(!message.contains('\n'), "one-line message: {message:?}");
    }
}

#[test]
fn the_model_refuses_an_invalid_config() {
    let cfg = ModelConfig {
        vocab_size: 10,
        n_embd: 30,
        n_head: 4,
        ..Default::default()
    };
    let err = shige::model::Gpt::seeded(&cfg, 0, &candle_core::Device::Cpu)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("not divisible"), "{err}");
}

#[test]
fn position_names_parse_and_unknown_ones_say_what_to_use() {
    for p in Position::ALL {
        assert_eq!(p.name().parse::<Position>().unwrap(), p);
    }
    let err = "absolute".parse::<Position>().unwrap_err().to_string();
    assert!(
        err.contains("none, learned, sinusoidal, rope, alibi"),
        "{err}"
    );
}
