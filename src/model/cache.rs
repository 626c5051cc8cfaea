//! The key/value cache for generation: each layer keeps the keys and values of the positions it
//! has seen, so that a new token attends to them without recomputing the whole context.

use candle_core::{Result, Tensor};
use candle_nn::kv_cache::KvCache;

/// One layer's cached keys and values, each (B, H, T, D), growing along T.
pub struct LayerCache(KvCache);

impl LayerCache {
    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.0.current_seq_len()
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends new keys and values k, v (B, H, Tnew, D) and returns all of them
    /// (B, H, Tcached + Tnew, D): views into the cache, each (T, D) slab contiguous.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        self.0.append(&k.contiguous()?, &v.contiguous()?)
    }
}

/// The caches of every layer of a model.
pub struct GenerationCache {
    /// One cache per transformer block, in order.
    pub layers: Vec<LayerCache>,
}

impl GenerationCache {
    /// An empty cache for `n_layer` layers, with room for `capacity` positions before it grows.
    pub fn new(n_layer: usize, capacity: usize) -> Self {
        GenerationCache {
            layers: (0..n_layer)
                .map(|_| LayerCache(KvCache::new(2, capacity.max(1))))
                .collect(),
        }
    }

    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, LayerCache::len)
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|l| l.0.reset());
    }
}
