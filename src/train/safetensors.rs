//! The safetensors files of a run as this program writes and reads them: the same tensors and
//! metadata give the same bytes in every process, a file that is not one says so, and tensors
//! that hold NaN or infinities are found by name.

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Serialises named tensors with string metadata into safetensors bytes: the same tensors and
/// metadata give the same bytes in every process (the header's keys sorted; safetensors writes
/// its metadata map in the order of a hash map, which differs from one process to the next).
pub fn to_safetensors(
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut sorted: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    sorted_header(safetensors::serialize(sorted, Some(metadata))?)
}

/// A safetensors file (8 bytes of header length, the JSON header padded with spaces to a
/// multiple of 8, the data) with its header's keys, and its metadata's, in sorted order. The
/// tensors' offsets count from the data's start, so the data stays as it is.
fn sorted_header(bytes: Vec<u8>) -> Result<Vec<u8>> {
    use std::collections::BTreeMap;
    let length = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
    let (header, data) = bytes[8..].split_at(length);
    let mut header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(header)?;
    if let Some(metadata) = header.remove("__metadata__") {
        let metadata: BTreeMap<String, String> = serde_json::from_value(metadata)?;
        header.insert("__metadata__".into(), serde_json::to_value(metadata)?);
    }
    let mut text = serde_json::to_string(&header)?.into_bytes();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + text.len() + data.len());
    out.extend((text.len() as u64).to_le_bytes());
    out.extend(text);
    out.extend(data);
    Ok(out)
}

/// Reads a safetensors file: its tensors and its metadata.
pub fn read_safetensors(path: &Path) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    let bytes = crate::files::read_limited(path, crate::files::WEIGHTS_LIMIT)
        .with_context(|| format!("cannot read {}", path.display()))?;
    parse_safetensors(&bytes, path)
}

/// The tensors and metadata of the safetensors file `bytes`, read from `path`.
pub fn parse_safetensors(
    bytes: &[u8],
    path: &Path,
) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    // The cause's own text only: safetensors' errors repeat their source in it.
    let invalid = |cause: &dyn std::fmt::Display| not_safetensors(path, cause);
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| invalid(&e))?;
    let metadata = header.metadata().clone().unwrap_or_default();
    let tensors =
        candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| invalid(&e))?;
    Ok((tensors, metadata))
}

/// The error of a file at `path` that is no safetensors file, for `cause`.
pub fn not_safetensors(path: &Path, cause: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is not a valid safetensors file (truncated or corrupted?): {cause}: restore it from a copy, or train the run again",
        path.display()
    )
}

/// Whether every element of `t` is a finite number.
pub fn is_finite(t: &Tensor) -> Result<bool> {
    let values = t
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    Ok(values.iter().all(|v| v.is_finite()))
}

/// The name of the first tensor (in the given order) holding a NaN or an infinity, if any.
pub fn first_non_finite<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
) -> Result<Option<String>> {
    for (name, t) in tensors {
        if !is_finite(t)? {
            return Ok(Some(name.to_string()));
        }
    }
    Ok(None)
}

/// Refuses `tensors` read from `path` where one holds NaN or infinite values: `unusable` says what
/// that makes of them ("these weights cannot be used; …").
pub fn refuse_non_finite<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
    path: &Path,
    unusable: &str,
) -> Result<()> {
    match first_non_finite(tensors)? {
        Some(name) => bail!(
            "{}: {name} holds NaN or infinite values: {unusable}",
            path.display()
        ),
        None => Ok(()),
    }
}
