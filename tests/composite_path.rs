//! The composite path (candle's own ops, which GPU builds run since the fused kernels are CPU
//! code), chosen for a model on the CPU: it trains like the fused path, and recomputing the
//! context there samples what the CPU decoder's cache samples.

mod common;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::Position;
use shige::ops::{Kernels, WeightFormat};
use shige::sample::{Generation, Generator, Sampling};
use shige::train::load::load_run;
use shige::train::{train, TrainOptions};
use std::path::Path;

/// (step, train loss, val loss) of each evaluation of a tiny run with `position` on `kernels`.
fn tiny_curve(position: Position, kernels: Kernels, dir: &Path) -> Vec<(usize, f64, f64)> {
    let mut config = common::tiny_config();
    config.model.position = position;
    train(TrainOptions {
        kernels,
        ..common::options(config, dir)
    })
    .unwrap();
    common::curve(dir)
}

#[test]
fn composite_ops_train_and_sample_like_the_fused_kernels() {
    let tmp = tempfile::tempdir().unwrap();
    for position in [Position::Learned, Position::Rope, Position::Alibi] {
        let fused_dir = tmp.path().join(format!("{position}-fused"));
        let fused = tiny_curve(position, Kernels::Fused, &fused_dir);
        let dir = tmp.path().join(format!("{position}-composite"));
        let composite = tiny_curve(position, Kernels::Composite, &dir);
        let (first, last) = (composite[0], composite[composite.len() - 1]);
        assert!(
            last.1 < first.1 - 0.3,
            "{position}: composite path did not learn: {composite:?}"
        );
        let weights = |kind: &str| {
            let dir = tmp.path().join(format!("{position}-{kind}"));
            std::fs::read(dir.join(shige::train::run_dir::MODEL_FILE)).unwrap()
        };
        // Training is deterministic, so bit-identical weights would mean one path ran twice.
        assert!(
            weights("fused") != weights("composite"),
            "{position}: the composite model ran the fused kernels"
        );
        for (f, c) in fused.iter().zip(&composite) {
            assert_eq!(f.0, c.0);
            let (dt, dv) = ((f.1 - c.1).abs(), (f.2 - c.2).abs());
            assert!(
                dt < 1e-3 && dv < 1e-3,
                "{position}: fused {f:?} and composite {c:?} curves part"
            );
        }
        // Recomputing the context on the composite graph draws what the CPU decoder's cached
        // steps draw (exact f32 weights) from the same model.
        let run = load_run(&dir).unwrap();
        let composite_model = run.model.clone().with_kernels(Kernels::Composite);
        let prompt = run.tokenizer.encode("\n白日").unwrap();
        let gen = Generation::new(40, Sampling::with_temperature(0.8), None);
        let draw = |model| {
            Generator::with_weights(model, WeightFormat::F32)
                .generate(
                    &prompt,
                    &gen,
                    &mut ChaCha8Rng::seed_from_u64(7),
                    &mut |_| {},
                )
                .unwrap()
        };
        assert_eq!(
            draw(&composite_model),
            draw(&run.model),
            "{position}: the composite path samples other text"
        );
    }
}
