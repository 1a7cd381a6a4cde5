//! Checkpoints: `<name>.safetensors` (the tensors, named `trunk0.weight`, …) and the JSON
//! sidecar `<name>.json` (the shape, level and training provenance, plus a hash of the
//! weights file so a mismatched pair is detected).
//!
//! Both files are written atomically (a temporary file in the same folder, synced, then
//! renamed over the target), weights first and sidecar last: the sidecar is the commit point,
//! and a save interrupted between the two renames leaves a pair whose hash disagrees, which
//! loading reports instead of using.

use super::net::param_shapes;
use super::policy::{SelectorPolicy, TrainingInfo};
use super::{level_name, LearnError, SelectorConfig};
use candle_core::{DType, Device};
use merit_interact::memory::{CandidateFeatures, Level};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The `format` of every sidecar this code writes; bump it when the input row or the
/// network layout changes.
pub const CHECKPOINT_FORMAT: &str = "merit-selector-v1";

/// The JSON sidecar of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sidecar {
    /// [`CHECKPOINT_FORMAT`].
    pub format: String,
    /// The network's shape and level.
    pub config: SelectorConfig,
    /// [`CandidateFeatures::LEN`] when the checkpoint was written (the input layout).
    pub feature_len: usize,
    /// How the policy was trained.
    pub training: TrainingInfo,
    /// 64-bit FNV-1a of the weights file's bytes, as 16 hex digits.
    pub weights_fnv1a64: String,
}

/// The sidecar path of a weights path: the same name with the extension `json`.
pub(crate) fn sidecar_path(weights: &Path) -> Result<PathBuf, LearnError> {
    if weights.file_name().is_none() {
        return Err(LearnError::Config(format!(
            "{}: a checkpoint path must name a file",
            weights.display()
        )));
    }
    if weights.extension().is_some_and(|e| e == "json") {
        return Err(LearnError::Config(format!(
            "{}: the weights file cannot end in .json (that is the sidecar's name)",
            weights.display()
        )));
    }
    Ok(weights.with_extension("json"))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> LearnError + '_ {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            LearnError::Missing {
                path: path.to_path_buf(),
            }
        } else {
            LearnError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), LearnError> {
    merit_core::fs::write_atomically(path, bytes).map_err(io_error(path))
}

fn hash_hex(bytes: &[u8]) -> String {
    format!("{:016x}", merit_core::hash::fnv1a(bytes))
}

impl SelectorPolicy {
    /// Saves the policy: the tensors to `weights` (safetensors, f32) and the sidecar next to
    /// it (`weights` with the extension `json`), each atomically, creating the folder when
    /// needed.
    pub fn save(&self, weights: &Path) -> Result<(), LearnError> {
        let sidecar = sidecar_path(weights)?;
        if let Some(dir) = weights.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        let bytes = crate::save_safetensors(&self.params, weights).map_err(|message| {
            LearnError::Weights {
                path: weights.to_path_buf(),
                message: format!("cannot write: {message}"),
            }
        })?;
        let description = Sidecar {
            format: CHECKPOINT_FORMAT.to_string(),
            config: *self.config(),
            feature_len: CandidateFeatures::LEN,
            training: self.training,
            weights_fnv1a64: hash_hex(&bytes),
        };
        let mut json =
            serde_json::to_vec_pretty(&description).map_err(|e| LearnError::Sidecar {
                path: sidecar.clone(),
                message: format!("cannot serialize: {e}"),
            })?;
        json.push(b'\n');
        write_atomic(&sidecar, &json)?;
        if let Some(dir) = weights.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the renames durable; not every platform can sync a folder, so best effort.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }

    /// Loads the checkpoint saved at `weights` (and its sidecar), checking the sidecar's
    /// format, the weights file's hash, and every tensor's name, type and shape.
    pub fn load(weights: &Path) -> Result<SelectorPolicy, LearnError> {
        let sidecar_file = sidecar_path(weights)?;
        let text = std::fs::read_to_string(&sidecar_file).map_err(io_error(&sidecar_file))?;
        let sidecar: Sidecar = serde_json::from_str(&text).map_err(|e| LearnError::Sidecar {
            path: sidecar_file.clone(),
            message: e.to_string(),
        })?;
        if sidecar.format != CHECKPOINT_FORMAT {
            return Err(LearnError::Sidecar {
                path: sidecar_file,
                message: format!(
                    "format `{}`, this build reads `{CHECKPOINT_FORMAT}`",
                    sidecar.format
                ),
            });
        }
        if sidecar.feature_len != CandidateFeatures::LEN {
            return Err(LearnError::DimensionMismatch {
                path: sidecar_file,
                what: "the candidate feature length".into(),
                expected: CandidateFeatures::LEN.to_string(),
                found: sidecar.feature_len.to_string(),
            });
        }
        sidecar.config.validate().map_err(|e| LearnError::Sidecar {
            path: sidecar_file.clone(),
            message: e.to_string(),
        })?;
        sidecar
            .training
            .ppo
            .validate()
            .map_err(|e| LearnError::Sidecar {
                path: sidecar_file.clone(),
                message: e.to_string(),
            })?;

        let bytes = std::fs::read(weights).map_err(io_error(weights))?;
        let hash = hash_hex(&bytes);
        if hash != sidecar.weights_fnv1a64 {
            return Err(LearnError::Weights {
                path: weights.to_path_buf(),
                message: format!(
                    "the file's hash is {hash}, its sidecar {} describes {} \
                     (the pair was mixed up or a save was interrupted)",
                    sidecar_file.display(),
                    sidecar.weights_fnv1a64
                ),
            });
        }
        let mut tensors =
            candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
                LearnError::Weights {
                    path: weights.to_path_buf(),
                    message: format!("not a readable safetensors file: {e}"),
                }
            })?;
        let mut params = HashMap::new();
        for (name, shape) in param_shapes(&sidecar.config) {
            let tensor = tensors.remove(&name).ok_or_else(|| LearnError::Weights {
                path: weights.to_path_buf(),
                message: format!("tensor `{name}` is missing"),
            })?;
            if tensor.dtype() != DType::F32 {
                return Err(LearnError::Weights {
                    path: weights.to_path_buf(),
                    message: format!("tensor `{name}` is {:?}, not f32", tensor.dtype()),
                });
            }
            if tensor.dims() != shape.as_slice() {
                return Err(LearnError::DimensionMismatch {
                    path: weights.to_path_buf(),
                    what: format!(
                        "the shape of tensor `{name}` (the sidecar describes embedding \
                         dimension {} and hidden size {})",
                        sidecar.config.embedding_dim, sidecar.config.hidden
                    ),
                    expected: format!("{shape:?}"),
                    found: format!("{:?}", tensor.dims()),
                });
            }
            if tensor
                .flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .any(|x| !x.is_finite())
            {
                return Err(LearnError::Weights {
                    path: weights.to_path_buf(),
                    message: format!("tensor `{name}` holds a non-finite value"),
                });
            }
            params.insert(name, tensor);
        }
        if let Some(extra) = tensors.keys().min() {
            return Err(LearnError::Weights {
                path: weights.to_path_buf(),
                message: format!("unexpected tensor `{extra}`"),
            });
        }
        SelectorPolicy::from_params(sidecar.config, params, sidecar.training)
    }

    /// [`SelectorPolicy::load`], then checks that the checkpoint is a `level` selector for
    /// embeddings of `embedding_dim` dimensions (what the caller's embedder produces).
    pub fn load_for(
        weights: &Path,
        level: Level,
        embedding_dim: usize,
    ) -> Result<SelectorPolicy, LearnError> {
        let policy = SelectorPolicy::load(weights)?;
        let config = policy.config();
        let sidecar = sidecar_path(weights)?;
        if config.level != level {
            return Err(LearnError::LevelMismatch {
                path: sidecar,
                expected: level,
                found: config.level,
            });
        }
        if config.embedding_dim != embedding_dim {
            return Err(LearnError::DimensionMismatch {
                path: sidecar,
                what: format!(
                    "the embedding dimension of this {}-level selector",
                    level_name(level)
                ),
                expected: embedding_dim.to_string(),
                found: config.embedding_dim.to_string(),
            });
        }
        Ok(policy)
    }
}
