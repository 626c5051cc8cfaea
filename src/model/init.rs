//! Seeded parameter initialisation.
//!
//! candle's CPU RNG cannot be seeded, so every parameter is drawn here from our own ChaCha RNG in the
//! order the model asks for them: one seed gives bit-identical weights on every machine.

use candle_core::{DType, Device, Result, Shape, Tensor, Var};
use candle_nn::{var_builder::SimpleBackend, Init, VarBuilder, VarMap};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};
use std::sync::Mutex;

/// A VarBuilder backend that creates each missing parameter from a seeded RNG and stores it in a
/// [`VarMap`], so that the optimiser and the checkpoint code find it there.
struct SeededInit {
    varmap: VarMap,
    rng: Mutex<ChaCha8Rng>,
}

impl SeededInit {
    fn draw(&self, shape: &Shape, init: Init) -> Result<Vec<f32>> {
        let n = shape.elem_count();
        let mut rng = self
            .rng
            .lock()
            .map_err(|_| candle_core::Error::Msg("init RNG poisoned".into()))?;
        let values = match init {
            Init::Const(c) => vec![c as f32; n],
            Init::Randn { mean, stdev } => {
                let normal = Normal::new(mean, stdev).map_err(candle_core::Error::wrap)?;
                (0..n).map(|_| normal.sample(&mut *rng) as f32).collect()
            }
            Init::Uniform { lo, up } => {
                let uniform = Uniform::new(lo, up).map_err(candle_core::Error::wrap)?;
                (0..n).map(|_| uniform.sample(&mut *rng) as f32).collect()
            }
            Init::Kaiming { .. } => candle_core::bail!("Kaiming init is not used by this model"),
        };
        Ok(values)
    }
}

impl SimpleBackend for SeededInit {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        if let Some(var) = self.varmap.data().lock().expect("varmap lock").get(name) {
            if var.shape() != &s {
                candle_core::bail!("shape mismatch on {name}: {s:?} <> {:?}", var.shape())
            }
            return Ok(var.as_tensor().clone());
        }
        let values = self.draw(&s, h)?;
        let var = Var::from_tensor(&Tensor::from_vec(values, s, dev)?.to_dtype(dtype)?)?;
        let tensor = var.as_tensor().clone();
        self.varmap
            .data()
            .lock()
            .expect("varmap lock")
            .insert(name.to_string(), var);
        Ok(tensor)
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> Result<Tensor> {
        candle_core::bail!("parameter {name} must be created with a shape and an init")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.varmap
            .data()
            .lock()
            .expect("varmap lock")
            .contains_key(name)
    }
}

/// A VarBuilder whose new parameters are drawn from `seed` and stored in `varmap`.
pub fn seeded_var_builder(varmap: &VarMap, seed: u64, device: &Device) -> VarBuilder<'static> {
    let backend = SeededInit {
        varmap: varmap.clone(),
        rng: Mutex::new(crate::random::rng(seed, crate::random::Stream::Weights)),
    };
    VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone())
}
